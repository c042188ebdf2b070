//! The bogus-value cases of `tests/src/bogus.rs` (included from there, as the GPU suite runs
//! them) against the test driver, each in a child process: what the crate refuses never
//! reaches the driver (the mock counts every call, and every use of a handle it did not make),
//! and what the driver is left to check is answered with an error. The mock has two devices, so
//! "another context" is device 1's primary context; it has no `cuCtxCreate`, so there is no
//! non-primary context to pass to `Context::retain_if_primary` here (the GPU suite does).

#[path = "../../src/bogus.rs"]
#[allow(dead_code)]
mod bogus;

use bogus::{Driver, Env};
use cuda_mock_driver::MockDriver;
use cuda_stream::{AsStream, Context};

/// Runs case `name` in a child process, or, in that child, runs `case` on the test driver.
fn mock_case(name: &str, case: fn(&Env)) {
    if !bogus::is_child(name) {
        return bogus::run_in_child(name);
    }
    let mock = MockDriver::global();
    let ctx = Context::primary(0).expect("the mock's device 0");
    let env = Env {
        ctx,
        driver: Driver::Mock,
        calls: Some(Box::new(move |name| match name {
            "bad uses" => mock.bad_uses(),
            _ => mock.calls(name),
        })),
        other_stream: Some(Box::new(|f| {
            let other = Context::primary(1).expect("the mock's device 1");
            let stream = other.new_stream().expect("a stream of device 1");
            f(stream.as_stream());
        })),
        non_primary_contexts: Vec::new(),
    };
    bogus::run_case(name, &env, case);
    assert_eq!(mock.bad_uses(), 0, "a handle the mock never made was used");
    assert_eq!(mock.bad_destroys(), 0);
}

crate::bogus_cases!(mock_case);
