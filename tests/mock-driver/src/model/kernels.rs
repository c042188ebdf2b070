//! The kernels the mock computes on the host, by name and parameter sizes (the PTX is not
//! executed: its name and signature stand for the meaning the tests and the example give it),
//! and the memory each one reads and writes (what the race detector checks); any other kernel
//! does nothing and touches nothing.
//!
//! - `saxpy(u32 n, f32 a, u64 x, u64 y)`: `y[i] = a * x[i] + y[i]` for `i < n` and `i` below
//!   the grid's thread count (one thread per element);
//! - `store_after_spin(u64 p, u32 value, u64 ns)`: `*p = value` (no spin);
//! - `copy_u32(u64 dst, u64 src)`: `*dst = *src`;
//! - `add_u32(u64 p, u32 value)`: `*p += value`;
//! - `spin(u64 ns)`: nothing;
//! - the random programs' kernels (`tests/src/random_programs/kernels.rs`), over `u32`s, for
//!   `i < n` and below the grid's thread count, with no spin: `rp_set(u64 dst, u32 n, u32 v,
//!   u64 ns)`: `dst[i] = v`; `rp_add(u64 dst, u64 src, u32 n, u32 k, u64 ns)`:
//!   `dst[i] += src[i] + k`; `rp_scale(u64 dst, u64 src, u32 n, u32 mul, u32 add, u64 ns)`:
//!   `dst[i] = src[i] * mul + add` (wrapping).

use super::races::{Acc, Kind};

/// Device memory as the kernels see it.
pub(crate) trait Memory {
    /// The bytes `[ptr, ptr + len)` of one live allocation.
    fn bytes(&mut self, ptr: u64, len: usize) -> Option<&mut [u8]>;
}

/// A launch's parameters, read by position.
struct Params<'a>(&'a [Vec<u8>]);

impl Params<'_> {
    fn u32(&self, i: usize) -> u32 {
        u32::from_le_bytes(self.0[i][..4].try_into().expect("4 bytes"))
    }
    fn u64(&self, i: usize) -> u64 {
        u64::from_le_bytes(self.0[i][..8].try_into().expect("8 bytes"))
    }
}

/// What a computed kernel is, with the elements it covers (`n`, capped by the grid).
enum Known {
    Saxpy {
        n: usize,
        a: f32,
        x: u64,
        y: u64,
    },
    Store {
        p: u64,
        v: u32,
    },
    CopyOne {
        dst: u64,
        src: u64,
    },
    AddOne {
        p: u64,
        v: u32,
    },
    Set {
        dst: u64,
        n: usize,
        v: u32,
    },
    Add {
        dst: u64,
        src: u64,
        n: usize,
        k: u32,
    },
    Scale {
        dst: u64,
        src: u64,
        n: usize,
        mul: u32,
        add: u32,
    },
}

fn known(name: &str, threads: u64, params: &[Vec<u8>]) -> Option<Known> {
    let sizes: Vec<usize> = params.iter().map(Vec::len).collect();
    let p = Params(params);
    let n = |i: usize| u64::from(p.u32(i)).min(threads) as usize;
    Some(match (name, sizes.as_slice()) {
        ("saxpy", [4, 4, 8, 8]) => Known::Saxpy {
            n: n(0),
            a: f32::from_bits(p.u32(1)),
            x: p.u64(2),
            y: p.u64(3),
        },
        ("store_after_spin", [8, 4, 8]) => Known::Store {
            p: p.u64(0),
            v: p.u32(1),
        },
        ("copy_u32", [8, 8]) => Known::CopyOne {
            dst: p.u64(0),
            src: p.u64(1),
        },
        ("add_u32", [8, 4]) => Known::AddOne {
            p: p.u64(0),
            v: p.u32(1),
        },
        ("rp_set", [8, 4, 4, 8]) => Known::Set {
            dst: p.u64(0),
            n: n(1),
            v: p.u32(2),
        },
        ("rp_add", [8, 8, 4, 4, 8]) => Known::Add {
            dst: p.u64(0),
            src: p.u64(1),
            n: n(2),
            k: p.u32(3),
        },
        ("rp_scale", [8, 8, 4, 4, 4, 8]) => Known::Scale {
            dst: p.u64(0),
            src: p.u64(1),
            n: n(2),
            mul: p.u32(3),
            add: p.u32(4),
        },
        _ => return None,
    })
}

/// The memory a kernel launch reads and writes (a read-modify-write counts as a write).
pub(crate) fn kernel_accesses(name: &str, threads: u64, params: &[Vec<u8>]) -> Vec<Acc> {
    let (r, w) = (Kind::Read, Kind::Write);
    match known(name, threads, params) {
        None => Vec::new(),
        Some(Known::Saxpy { n: 0, .. }) => Vec::new(),
        Some(Known::Saxpy { n, x, y, .. }) => {
            vec![Acc::device(x, 4 * n, r), Acc::device(y, 4 * n, w)]
        }
        Some(Known::Store { p, .. } | Known::AddOne { p, .. }) => vec![Acc::device(p, 4, w)],
        Some(Known::CopyOne { dst, src }) => {
            vec![Acc::device(src, 4, r), Acc::device(dst, 4, w)]
        }
        Some(Known::Set { dst, n, .. }) => vec![Acc::device(dst, 4 * n, w)],
        Some(Known::Add { dst, src, n, .. } | Known::Scale { dst, src, n, .. }) => {
            vec![Acc::device(src, 4 * n, r), Acc::device(dst, 4 * n, w)]
        }
    }
}

fn words(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect()
}

/// Runs a computed kernel (any other does nothing). Returns `false` where the memory it touches
/// is not allocated.
pub(crate) fn run_kernel(
    mem: &mut dyn Memory,
    name: &str,
    threads: u64,
    params: &[Vec<u8>],
) -> bool {
    let read = |mem: &mut dyn Memory, p: u64, n: usize| mem.bytes(p, 4 * n).map(|b| words(b));
    let write = |mem: &mut dyn Memory, p: u64, vs: &[u32]| match mem.bytes(p, 4 * vs.len()) {
        Some(out) => {
            for (o, v) in out.chunks_exact_mut(4).zip(vs) {
                o.copy_from_slice(&v.to_le_bytes());
            }
            true
        }
        None => false,
    };
    match known(name, threads, params) {
        None => true,
        Some(Known::Saxpy { n: 0, .. }) => true,
        Some(Known::Saxpy { n, a, x, y }) => {
            let (Some(xs), Some(ys)) = (read(mem, x, n), read(mem, y, n)) else {
                return false;
            };
            let out: Vec<u32> = xs
                .iter()
                .zip(&ys)
                .map(|(&xv, &yv)| a.mul_add(f32::from_bits(xv), f32::from_bits(yv)).to_bits())
                .collect();
            write(mem, y, &out)
        }
        Some(Known::Store { p, v }) => write(mem, p, &[v]),
        Some(Known::CopyOne { dst, src }) => match read(mem, src, 1) {
            Some(v) => write(mem, dst, &v),
            None => false,
        },
        Some(Known::AddOne { p, v }) => match read(mem, p, 1) {
            Some(old) => write(mem, p, &[old[0].wrapping_add(v)]),
            None => false,
        },
        Some(Known::Set { dst, n, v }) => write(mem, dst, &vec![v; n]),
        Some(Known::Add { dst, src, n, k }) => match (read(mem, src, n), read(mem, dst, n)) {
            (Some(s), Some(d)) => {
                let out: Vec<u32> = d
                    .iter()
                    .zip(&s)
                    .map(|(&d, &s)| d.wrapping_add(s).wrapping_add(k))
                    .collect();
                write(mem, dst, &out)
            }
            _ => false,
        },
        Some(Known::Scale {
            dst,
            src,
            n,
            mul,
            add,
        }) => match read(mem, src, n) {
            Some(s) => {
                let out: Vec<u32> = s
                    .iter()
                    .map(|&s| s.wrapping_mul(mul).wrapping_add(add))
                    .collect();
                write(mem, dst, &out)
            }
            None => false,
        },
    }
}
