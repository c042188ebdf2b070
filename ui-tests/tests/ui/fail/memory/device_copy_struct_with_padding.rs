// A `device_copy!` struct with padding (4 bytes after `scale`, before the 8-byte-aligned
// `offset`): refused at compile time, where a hand-written `unsafe impl` would send
// uninitialised bytes to the device.

cuda_stream::device_copy! {
    #[derive(Clone, Copy)]
    pub struct Params {
        pub scale: f32,
        pub offset: f64,
    }
}

fn main() {}
