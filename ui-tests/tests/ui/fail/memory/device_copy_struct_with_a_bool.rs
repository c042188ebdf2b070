// A `device_copy!` struct with a field that is not `DeviceCopy` (a `bool`, whose byte the
// device may leave as any value): refused at compile time.

cuda_stream::device_copy! {
    #[derive(Clone, Copy)]
    pub struct Flags {
        pub on: bool,
        pub _pad: [u8; 3],
        pub n: u32,
    }
}

fn main() {}
