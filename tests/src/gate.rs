//! A gate on a stream: a host function that holds the stream's later work until the test opens
//! it, so that work stays pending while the test looks.

use std::sync::mpsc;

use cuda_stream::OwnedStream;

/// Holds `stream`'s later work until the returned sender is dropped.
pub fn gate(stream: &OwnedStream) -> mpsc::Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    stream
        .launch_host_func(move || {
            let _ = rx.recv();
        })
        .expect("host function");
    tx
}
