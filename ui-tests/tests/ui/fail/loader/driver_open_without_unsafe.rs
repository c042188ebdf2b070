// Loading a driver library from a path runs the library's initialisers and calls its functions,
// trusting their types: `Driver::open` and `Driver::open_with` are `unsafe`, as
// `libloading::Library::new` is. (The process-wide driver, `Driver::global`, stays safe.)
use cuda_stream::ffi::{Driver, DriverOptions};

fn main() {
    let _ = Driver::open("/tmp/libnot-a-driver.so");
    let _ = Driver::open_with("/tmp/libnot-a-driver.so", DriverOptions::new());
}
