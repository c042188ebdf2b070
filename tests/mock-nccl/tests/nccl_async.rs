//! Asynchronous errors against the fake NCCL: a communicator that reported one fails its next
//! call with that error, alone or in a group, and enqueues nothing; its drop aborts it. NCCL
//! since 2.14 refuses such a call itself, so the crate asks only once a call failed; before 2.14
//! (the fake reporting an older version, in a child process) the crate asks before every call.

use cuda_mock_nccl::MockNccl;
use cuda_stream::ffi::nccl::ncclResult_t;
use cuda_stream::nccl::{Group, ReduceOp};
use cuda_stream::{DeviceBuffer, Error};

mod fixture;

use fixture::{fake, in_child, in_child_with, one_rank};

/// The case, against an NCCL that refuses a call on a broken communicator itself (2.14 and
/// later) or not: the calls NCCL saw after the error tell which side refused.
fn async_error_case(n: &MockNccl, nccl_refuses: bool) {
    let alive = n.live_comms();
    let comm = one_rank();
    let ctx = comm.context().clone();
    let s = ctx.new_stream().unwrap();
    let mut x = DeviceBuffer::<f32>::zeroed(&ctx, &s, 64).unwrap();
    comm.all_reduce_in_place(&s, &mut x, ReduceOp::Sum).unwrap();
    assert_eq!(n.launched(), 1);
    assert!(n.set_async_error(comm.raw(), ncclResult_t::ncclRemoteError));
    let e = comm
        .all_reduce_in_place(&s, &mut x, ReduceOp::Sum)
        .unwrap_err();
    assert_eq!(e.to_string(), "ncclCommGetAsyncError: ncclRemoteError");
    // In a group as well: the call is refused, and the group with it.
    let mut g = Group::new();
    g.all_reduce_in_place(&comm, &s, &mut x, ReduceOp::Sum)
        .unwrap();
    let e = g.run().unwrap_err();
    assert_eq!(e.to_string(), "ncclCommGetAsyncError: ncclRemoteError");
    assert_eq!(n.launched(), 1, "nothing enqueued after the error");
    assert_eq!(n.group_depth(), 0);
    // A new NCCL saw both calls and refused them; an old one saw neither (the crate asked
    // first, and issued no call, nor a group).
    let (reduces, groups) = if nccl_refuses { (3, 1) } else { (1, 0) };
    assert_eq!(n.calls("ncclAllReduce"), reduces);
    assert_eq!(n.calls("ncclGroupStart"), groups);
    assert!(matches!(comm.check_async(), Err(Error::Nccl { .. })));
    drop(comm);
    assert_eq!(
        (n.calls("ncclCommAbort"), n.calls("ncclCommDestroy")),
        (1, 0)
    );
    assert_eq!(n.live_comms(), alive);
}

#[test]
fn an_async_error_is_reported_on_the_next_call_and_the_drop_aborts() {
    if in_child().is_some() {
        return;
    }
    let (_g, n, _m) = fake();
    async_error_case(n, true);
}

#[test]
fn an_nccl_before_2_14_is_asked_for_the_async_error_before_each_call() {
    const NAME: &str = "an_nccl_before_2_14_is_asked_for_the_async_error_before_each_call";
    match in_child().as_deref() {
        Some(NAME) => {
            let (_g, n, _m) = fake();
            assert_eq!(cuda_stream::nccl::nccl_version().unwrap(), 21212);
            async_error_case(n, false);
        }
        Some(_) => {}
        None => {
            let text = in_child_with(NAME, &[("MOCK_NCCL_VERSION", "21212".as_ref())]);
            assert!(text.contains("1 passed"), "{text}");
        }
    }
}
