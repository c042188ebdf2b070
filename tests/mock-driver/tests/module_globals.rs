//! A module's global variables as buffers (`Module::global`) against the test driver: checked
//! against the symbol (size, name), copied and filled like any buffer, two handles of one
//! variable ordered as one (the race detector would say otherwise), the module kept loaded by a
//! graph that captured work on one of its variables, and `into_raw` refused.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use cuda_mock_driver::{MockDriver, Serialized};
use cuda_stream::{CaptureMode, Context, Error, Module};

static LOCK: Mutex<()> = Mutex::new(());

fn mock() -> (Serialized, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    m.reset();
    (m.checked(guard), m)
}

/// Waits for the mock's queued work (host functions, destructors of user objects).
fn settle(m: &MockDriver) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while m.pending_host_fns() > 0 {
        assert!(Instant::now() < deadline, "work still pending");
        std::thread::sleep(Duration::from_micros(50));
    }
}

const PTX: &str = ".version 7.0\n.target sm_50\n.address_size 64\n\
    .visible .const .align 4 .b8 coeffs[64];\n\
    .visible .global .align 8 .u64 total;\n\
    .visible .entry k(.param .u64 k_x)\n{\n\tret;\n}\n";

#[test]
fn a_global_is_a_buffer_checked_against_its_symbol() {
    let (_lock, _m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let module = Module::from_ptx(&ctx, PTX).unwrap();
    let coeffs = module.global::<f32>("coeffs").unwrap();
    assert_eq!(coeffs.len(), 16);
    assert_eq!(module.global::<u64>("total").unwrap().len(), 1);
    assert_eq!(module.global::<[u32; 4]>("coeffs").unwrap().len(), 4);
    match module.global::<[u8; 3]>("coeffs") {
        Err(Error::InvalidArgument { reason }) => {
            assert!(reason.contains("64 bytes"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    match module.global::<u32>("nothing") {
        Err(e @ Error::GlobalNotFound { .. }) => assert_eq!(
            e.to_string(),
            "the module has no global variable named `nothing`"
        ),
        other => panic!("{other:?}"),
    }
    // Variables start zeroed in the test driver; a copy and a fill reach them.
    assert_eq!(coeffs.to_vec(&s).unwrap(), [0.0; 16]);
    let values: Vec<f32> = (0..16).map(|i| i as f32 * 0.5).collect();
    coeffs.copy_from_host(&s, &values).unwrap();
    assert_eq!(coeffs.to_vec(&s).unwrap(), values);
    let total = module.global::<u32>("total").unwrap();
    assert_eq!(total.len(), 2);
    total.fill(&s, 7).unwrap();
    assert_eq!(total.to_vec(&s).unwrap(), [7, 7]);
    // The memory is the module's: never handed over, and a drop frees nothing.
    match total.into_raw() {
        Err(e) => assert!(e.error().is_none(), "the module holds it too"),
        Ok(_) => panic!("a global handed over"),
    }
    drop(coeffs);
    assert_eq!(
        module.global::<f32>("coeffs").unwrap().to_vec(&s).unwrap(),
        values,
        "the variable keeps its values"
    );
    module.close().unwrap();
}

#[test]
fn two_buffers_of_one_global_are_ordered_as_one() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let module = Module::from_ptx(&ctx, PTX).unwrap();
    for round in 0..20u32 {
        let a = module.global::<u32>("coeffs").unwrap();
        let b = module.global::<u32>("coeffs").unwrap();
        // Written on `s` through one, read on `t` through the other: the read waits.
        a.fill(&s, round).unwrap();
        assert_eq!(b.to_vec(&t).unwrap(), [round; 16], "round {round}");
        // And the other way: a write on `t` after a read on `s`.
        let host = a.to_vec(&s).unwrap();
        assert_eq!(host, [round; 16]);
        b.fill(&t, round + 100).unwrap();
        assert_eq!(a.to_vec(&s).unwrap(), [round + 100; 16]);
    }
    drop(module);
    settle(m);
    assert_eq!(m.races(), 0, "{:?}", m.race_reports());
}

#[test]
fn a_graph_that_captured_work_on_a_global_keeps_the_module_loaded() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let mut s = ctx.new_stream().unwrap();
    let modules = m.live_modules();
    let module = Module::from_ptx(&ctx, PTX).unwrap();
    let total = module.global::<u32>("total").unwrap();
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| total.fill(&cap, 42))
        .unwrap();
    let exec = graph.instantiate().unwrap();
    drop(graph);
    let ptr = total.device_ptr();
    drop(total);
    // The graph holds the variable: closing unloads nothing yet.
    module.close().unwrap();
    assert_eq!(m.live_modules(), modules + 1, "kept loaded by the graph");
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(
        m.read_memory(ptr, 8).unwrap(),
        [42, 0, 0, 0, 42, 0, 0, 0],
        "the replay wrote the variable"
    );
    drop(exec);
    settle(m);
    cuda_stream::drain_deferred();
    settle(m);
    assert_eq!(m.live_modules(), modules, "unloaded with the last graph");
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}
