//! Behaviour that needs no GPU: options, ranges, errors, and refusing what must be refused before
//! any driver call.

use std::error::Error as _;

use cuda_stream::ffi::CUresult;
use cuda_stream::{Device, Error, EventOptions, PriorityRange, Stream, StreamOptions};

#[test]
fn priority_range_contains_clamps_and_reports() {
    let r = PriorityRange::new(0, -5);
    assert_eq!((r.least(), r.greatest()), (0, -5));
    assert!(r.contains(0) && r.contains(-5) && r.contains(-3));
    assert!(!r.contains(1) && !r.contains(-6));
    assert_eq!(r.clamp(3), 0);
    assert_eq!(r.clamp(-9), -5);
    assert_eq!(r.check(-2).unwrap(), -2);
    let err = r.check(-6).unwrap_err();
    assert!(matches!(err, Error::InvalidPriority { priority: -6, range } if range == r));
    assert_eq!(
        err.to_string(),
        "stream priority -6 is outside the context's range [-5, 0] (greatest to least)"
    );
}

#[test]
fn streams_are_non_blocking_unless_asked() {
    use cuda_stream::ffi::CUstream_flags;
    assert_eq!(
        StreamOptions::new().flags(),
        CUstream_flags::CU_STREAM_NON_BLOCKING.0
    );
    assert_eq!(
        StreamOptions::default().flags(),
        CUstream_flags::CU_STREAM_NON_BLOCKING.0
    );
    assert_eq!(
        StreamOptions::new().blocking(true).flags(),
        CUstream_flags::CU_STREAM_DEFAULT.0
    );
}

#[test]
fn event_options_map_to_driver_flags_and_reject_timed_interprocess() {
    use cuda_stream::ffi::CUevent_flags as F;
    assert_eq!(
        EventOptions::new().flags().unwrap(),
        F::CU_EVENT_DISABLE_TIMING.0
    );
    assert_eq!(
        EventOptions::new().timing(true).flags().unwrap(),
        F::CU_EVENT_DEFAULT.0
    );
    assert_eq!(
        EventOptions::new().blocking_sync(true).flags().unwrap(),
        F::CU_EVENT_DISABLE_TIMING.0 | F::CU_EVENT_BLOCKING_SYNC.0
    );
    assert_eq!(
        EventOptions::new().interprocess(true).flags().unwrap(),
        F::CU_EVENT_DISABLE_TIMING.0 | F::CU_EVENT_INTERPROCESS.0
    );
    let err = EventOptions::new()
        .interprocess(true)
        .timing(true)
        .flags()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidEventOptions { .. }), "{err:?}");
}

#[test]
fn borrowing_a_special_handle_is_refused_before_any_driver_call() {
    let owner = ();
    for value in [0usize, 1, 2] {
        // SAFETY: the special values are rejected before the handle is used.
        let err = unsafe { Stream::borrow_raw(value as _, &owner) }.unwrap_err();
        assert!(
            matches!(err, Error::SpecialHandle { handle } if handle == value),
            "{err:?}"
        );
    }
}

#[test]
fn driver_errors_name_the_call_and_result_with_the_cause_as_source() {
    // Build the error the way the chokepoint does, through a public path that needs no GPU.
    let code = cuda_stream::DriverCode(CUresult::CUDA_ERROR_INVALID_CONTEXT);
    let err = Error::Driver {
        call: "cuStreamCreate",
        code,
    };
    assert_eq!(
        err.to_string(),
        "cuStreamCreate: CUDA_ERROR_INVALID_CONTEXT"
    );
    assert_eq!(
        err.driver_code(),
        Some(CUresult::CUDA_ERROR_INVALID_CONTEXT)
    );
    assert_eq!(err.call(), Some("cuStreamCreate"));
    let source = err.source().expect("the code is the source");
    assert!(source.to_string().contains("context"), "{source}");
    assert_eq!(format!("{code:?}"), "CUDA_ERROR_INVALID_CONTEXT(201)");
}

#[test]
fn without_a_driver_every_entry_point_returns_the_load_error() {
    match Device::count() {
        Err(Error::Load(load)) => {
            let err = Device::count().unwrap_err();
            assert_eq!(err.to_string(), "no usable CUDA driver");
            assert!(
                err.source().unwrap().to_string().contains("libcuda.so.1"),
                "{load}"
            );
            assert!(matches!(
                cuda_stream::Context::primary(0),
                Err(Error::Load(_))
            ));
            assert!(matches!(cuda_stream::driver_version(), Err(Error::Load(_))));
        }
        Ok(n) => eprintln!("skipped: a CUDA driver is present ({n} devices)"),
        Err(e) => panic!("unexpected error without a GPU: {e:?}"),
    }
}
