// A thread's capture mode belongs to that thread: the guard that restores it is not `Send`.
use cuda_stream::{CaptureMode, exchange_capture_mode};

fn main() -> cuda_stream::Result<()> {
    let guard = exchange_capture_mode(CaptureMode::Relaxed)?;
    std::thread::spawn(move || drop(guard)).join().unwrap();
    Ok(())
}
