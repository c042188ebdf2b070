// A `'static + Send` closure (owning its data and a channel end) is accepted by
// `launch_host_func`, on an owned stream and on a borrowed view.
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use cuda_stream::{AsStream, Context, Error, Result};

fn run(ctx: Context) -> Result<()> {
    let stream = ctx.new_stream()?;
    let (tx, rx) = mpsc::channel();
    let data = vec![1, 2, 3];
    stream.launch_host_func(move || tx.send(data.iter().sum::<i32>()).expect("receiver alive"))?;

    let count = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&count);
    stream.as_stream().launch_host_func(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    })?;

    stream.synchronize()?;
    assert_eq!(rx.recv().expect("host function ran"), 6);
    assert_eq!(count.load(Ordering::SeqCst), 1);
    Ok(())
}

fn main() {
    match Context::primary(0) {
        Ok(ctx) => run(ctx).expect("stream operations failed"),
        Err(
            e
            @ (Error::Load(_) | Error::NoSuchDevice { .. } | Error::Driver { call: "cuInit", .. }),
        ) => {
            eprintln!("skipped: no CUDA device: {e}")
        }
        Err(e) => panic!("Context::primary(0) failed: {e}"),
    }
}
