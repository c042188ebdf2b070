//! Links the mock driver's cdylib with `-z nodelete` on Linux: it runs a worker thread for host
//! functions and keeps process-wide state, so it must never be unmapped by `dlclose` (a dropped
//! `cuda_sys::Driver`), exactly as the real libcuda stays loaded. Shared with `cuda-mock-driver-old`.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    }
}
