//! Views of a buffer (`slice`, `slice_mut`, `split_at`, `split_at_mut`) against the test driver:
//! ranges checked (out of range, reversed, past the end: `Error::OutOfRange`); fill, device
//! copies and host copies touch the view's values only; a fill of a `u8` view at an odd
//! address takes a word the address allows; copies between views of one buffer refuse an
//! overlap; pinned and peer copies of views; views are tracked at the allocation, so a view written on one stream and another
//! view of the same buffer used on a second stream are ordered (the race detector would say
//! otherwise), and the buffer's free waits for its views' uses.

use std::sync::Mutex;

use cuda_mock_driver::{MockDriver, Serialized};
use cuda_stream::{Context, DeviceBuffer, Error};
use cuda_stream_tests::gate;

static LOCK: Mutex<()> = Mutex::new(());

fn mock() -> (Serialized, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    m.reset();
    (m.checked(guard), m)
}

#[test]
fn ranges_are_checked() {
    let (_lock, _m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let mut x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 10).unwrap();
    assert_eq!(x.slice(2..6).unwrap().len(), 4);
    assert_eq!(x.slice(..).unwrap().len(), 10);
    assert_eq!(x.slice(10..).unwrap().len(), 0);
    assert_eq!(x.slice(3..=3).unwrap().len(), 1);
    assert_eq!(
        x.slice(2..6).unwrap().device_ptr(),
        x.device_ptr() + 8,
        "the view starts at its first value"
    );
    for (r, start, end) in [((4, 11), 4, 11), ((7, 3), 7, 3), ((11, 11), 11, 11)] {
        match x.slice(r.0..r.1) {
            Err(Error::OutOfRange {
                start: a,
                end: b,
                len: 10,
            }) => assert_eq!((a, b), (start, end)),
            other => panic!("{r:?}: {other:?}"),
        }
    }
    assert!(matches!(
        x.slice_mut(..=10),
        Err(Error::OutOfRange { end: 11, .. })
    ));
    assert!(matches!(x.split_at(11), Err(Error::OutOfRange { .. })));
    let (a, b) = x.split_at_mut(4).unwrap();
    assert_eq!((a.len(), b.len()), (4, 6));
    assert_eq!(b.device_ptr(), a.device_ptr() + 16);
    // A view of a view is checked against the view.
    let v = x.slice(2..6).unwrap();
    assert_eq!(v.slice(1..3).unwrap().device_ptr(), x.device_ptr() + 12);
    assert!(matches!(
        v.slice(1..5),
        Err(Error::OutOfRange { len: 4, .. })
    ));
    assert_eq!(
        Error::OutOfRange {
            start: 4,
            end: 11,
            len: 10
        }
        .to_string(),
        "range 4..11 is out of bounds of 10 values"
    );
}

#[test]
fn fills_and_copies_touch_the_view_only() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let mut x = DeviceBuffer::<u32>::from_host(&ctx, &s, &(0..8).collect::<Vec<u32>>()).unwrap();
    x.slice_mut(2..5).unwrap().fill(&s, 9).unwrap();
    assert_eq!(x.to_vec(&s).unwrap(), [0, 1, 9, 9, 9, 5, 6, 7]);
    x.slice_mut(6..)
        .unwrap()
        .copy_from_host(&s, &[60, 70])
        .unwrap();
    assert_eq!(x.slice(5..).unwrap().to_vec(&s).unwrap(), [5, 60, 70]);
    let mut out = [0u32; 2];
    x.slice(0..2).unwrap().copy_to_host(&s, &mut out).unwrap();
    assert_eq!(out, [0, 1]);
    // A device copy between two halves of one buffer, and from a buffer into a view.
    let (mut lo, hi) = x.split_at_mut(4).unwrap();
    lo.copy_from(&s, &hi).unwrap();
    assert_eq!(x.to_vec(&s).unwrap(), [9, 5, 60, 70, 9, 5, 60, 70]);
    let y = DeviceBuffer::<u32>::from_host(&ctx, &s, &[1, 2]).unwrap();
    x.slice_mut(3..5).unwrap().copy_from(&s, &y).unwrap();
    y.copy_from(&s, &x.slice(0..2).unwrap()).unwrap();
    assert_eq!(x.to_vec(&s).unwrap(), [9, 5, 60, 1, 2, 5, 60, 70]);
    assert_eq!(y.to_vec(&s).unwrap(), [9, 5]);
    // Lengths are the view's.
    assert!(matches!(
        x.slice_mut(0..3).unwrap().copy_from(&s, &y),
        Err(Error::LengthMismatch {
            expected: 3,
            actual: 2
        })
    ));
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn a_copy_onto_itself_is_nothing_and_odd_addresses_take_narrow_words() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    // A buffer copied from its own whole view: nothing to enqueue. (Overlapping views cannot
    // meet in one copy: the destination view borrows the buffer mutably, and a buffer's own
    // copy takes a source of its whole length; the copy refuses an overlap all the same.)
    let x = DeviceBuffer::<u8>::zeroed(&ctx, &s, 16).unwrap();
    let copies = m.calls("cuMemcpyDtoDAsync");
    x.copy_from(&s, &x.as_slice()).unwrap();
    x.copy_from(&s, &x).unwrap();
    assert_eq!(m.calls("cuMemcpyDtoDAsync"), copies);
    // A u8 view at an odd address: the fill's word is a byte (the driver refuses a 4-byte
    // memset at an address that is no multiple of 4).
    let mut z = DeviceBuffer::<u8>::zeroed(&ctx, &s, 16).unwrap();
    let (d8, d32) = (m.calls("cuMemsetD8Async"), m.calls("cuMemsetD32Async"));
    z.slice_mut(1..9).unwrap().fill(&s, 7).unwrap();
    assert_eq!(m.calls("cuMemsetD8Async"), d8 + 1);
    z.slice_mut(4..12).unwrap().fill(&s, 3).unwrap();
    assert_eq!(
        m.calls("cuMemsetD32Async"),
        d32 + 1,
        "aligned: the widest word"
    );
    z.slice_mut(2..4).unwrap().fill(&s, 5).unwrap();
    assert_eq!(
        z.to_vec(&s).unwrap(),
        [0, 7, 5, 5, 3, 3, 3, 3, 3, 3, 3, 3, 0, 0, 0, 0]
    );
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn views_are_tracked_at_the_allocation() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let mut x = DeviceBuffer::<u32>::zeroed(&ctx, &a, 8).unwrap();
    let hold = gate(&a);
    let waits = m.calls("cuStreamWaitEvent");
    {
        let (mut lo, mut hi) = x.split_at_mut(4).unwrap();
        lo.fill(&a, 1).unwrap();
        // The other half on another stream: ordered after the first (one allocation).
        hi.fill(&b, 2).unwrap();
    }
    assert_eq!(
        m.calls("cuStreamWaitEvent"),
        waits + 1,
        "b waits for a's write of the other half"
    );
    // A read of one view on b after a write of another on a: ordered too.
    x.slice_mut(0..2).unwrap().fill(&a, 3).unwrap();
    let y = DeviceBuffer::<u32>::zeroed(&ctx, &b, 2).unwrap();
    let waits = m.calls("cuStreamWaitEvent");
    y.copy_from(&b, &x.slice(6..).unwrap()).unwrap();
    assert_eq!(
        m.calls("cuStreamWaitEvent"),
        waits + 1,
        "b's read waits for a's write"
    );
    drop(hold);
    assert_eq!(y.to_vec(&b).unwrap(), [2, 2]);
    assert_eq!(x.to_vec(&b).unwrap(), [3, 3, 1, 1, 2, 2, 2, 2]);
    // The free waits for the views' uses: a fill of a view held behind a gate, then the drop.
    let hold = gate(&a);
    x.slice_mut(1..3).unwrap().fill(&a, 4).unwrap();
    drop(x);
    drop(hold);
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn pinned_and_peer_copies_of_views() {
    let (_lock, m) = mock();
    let (c0, c1) = (Context::primary(0).unwrap(), Context::primary(1).unwrap());
    let (s0, s1) = (c0.new_stream().unwrap(), c1.new_stream().unwrap());
    let mut x = DeviceBuffer::<u32>::zeroed(&c0, &s0, 8).unwrap();
    let up = cuda_stream::PinnedHostBuffer::from_slice(&c0, &[1, 2, 3, 4]).unwrap();
    x.slice_mut(2..6)
        .unwrap()
        .copy_from_pinned(&s0, &up)
        .unwrap();
    let mut down = cuda_stream::PinnedHostBuffer::<u32>::zeroed(&c0, 3).unwrap();
    x.slice(3..6)
        .unwrap()
        .copy_to_pinned(&s0, &mut down)
        .unwrap();
    assert_eq!(down.as_slice().unwrap(), [2, 3, 4]);
    assert_eq!(x.to_vec(&s0).unwrap(), [0, 0, 1, 2, 3, 4, 0, 0]);
    // A view of a buffer on device 1 from a view on device 0, on a stream of device 1.
    let mut y = DeviceBuffer::<u32>::zeroed(&c1, &s1, 6).unwrap();
    y.slice_mut(1..5)
        .unwrap()
        .copy_from_peer(&s1, &x.slice(2..6).unwrap())
        .unwrap();
    assert_eq!(y.to_vec(&s1).unwrap(), [0, 1, 2, 3, 4, 0]);
    // And a whole buffer from a view.
    let z = DeviceBuffer::<u32>::zeroed(&c1, &s1, 2).unwrap();
    z.copy_from_peer(&s1, &x.slice(3..5).unwrap()).unwrap();
    assert_eq!(z.to_vec(&s1).unwrap(), [2, 3]);
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}
