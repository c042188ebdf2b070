//! The random programs' kernels: element-wise over `u32`s, one thread per element (`i < n`),
//! each thread first spinning `ns` nanoseconds on `%globaltimer` so that on a GPU its writes land
//! late (a missing wait then shows as a stale value). The test driver computes them on the host
//! by name and signature (no spin), and knows what each reads and writes
//! (`tests/mock-driver/src/model/kernels.rs`).
//!
//! - `rp_set(u32 *dst, u32 n, u32 v, u64 ns)`: `dst[i] = v`;
//! - `rp_add(u32 *dst, const u32 *src, u32 n, u32 k, u64 ns)`: `dst[i] += src[i] + k`;
//! - `rp_scale(u32 *dst, const u32 *src, u32 n, u32 mul, u32 add, u64 ns)`:
//!   `dst[i] = src[i] * mul + add` (wrapping).

/// The module's PTX (`sm_50`, any driver JIT-compiles it for newer GPUs).
pub const RP_PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64

.visible .entry rp_set(
    .param .u64 rp_set_dst,
    .param .u32 rp_set_n,
    .param .u32 rp_set_v,
    .param .u64 rp_set_ns
)
{
    .reg .pred  %p<3>;
    .reg .b32   %r<8>;
    .reg .b64   %rd<10>;

    ld.param.u64        %rd1, [rp_set_dst];
    ld.param.u32        %r1, [rp_set_n];
    ld.param.u32        %r2, [rp_set_v];
    ld.param.u64        %rd2, [rp_set_ns];
    mov.u32             %r3, %ctaid.x;
    mov.u32             %r4, %ntid.x;
    mov.u32             %r5, %tid.x;
    mad.lo.s32          %r6, %r3, %r4, %r5;
    setp.ge.u32         %p1, %r6, %r1;
    @%p1 bra            $L_set_done;
    mov.u64             %rd3, %globaltimer;
$L_set_spin:
    mov.u64             %rd4, %globaltimer;
    sub.u64             %rd5, %rd4, %rd3;
    setp.lt.u64         %p2, %rd5, %rd2;
    @%p2 bra            $L_set_spin;
    cvta.to.global.u64  %rd6, %rd1;
    mul.wide.u32        %rd7, %r6, 4;
    add.s64             %rd8, %rd6, %rd7;
    st.global.u32       [%rd8], %r2;
$L_set_done:
    ret;
}

.visible .entry rp_add(
    .param .u64 rp_add_dst,
    .param .u64 rp_add_src,
    .param .u32 rp_add_n,
    .param .u32 rp_add_k,
    .param .u64 rp_add_ns
)
{
    .reg .pred  %p<3>;
    .reg .b32   %r<12>;
    .reg .b64   %rd<14>;

    ld.param.u64        %rd1, [rp_add_dst];
    ld.param.u64        %rd2, [rp_add_src];
    ld.param.u32        %r1, [rp_add_n];
    ld.param.u32        %r2, [rp_add_k];
    ld.param.u64        %rd3, [rp_add_ns];
    mov.u32             %r3, %ctaid.x;
    mov.u32             %r4, %ntid.x;
    mov.u32             %r5, %tid.x;
    mad.lo.s32          %r6, %r3, %r4, %r5;
    setp.ge.u32         %p1, %r6, %r1;
    @%p1 bra            $L_add_done;
    mov.u64             %rd4, %globaltimer;
$L_add_spin:
    mov.u64             %rd5, %globaltimer;
    sub.u64             %rd6, %rd5, %rd4;
    setp.lt.u64         %p2, %rd6, %rd3;
    @%p2 bra            $L_add_spin;
    cvta.to.global.u64  %rd7, %rd1;
    cvta.to.global.u64  %rd8, %rd2;
    mul.wide.u32        %rd9, %r6, 4;
    add.s64             %rd10, %rd7, %rd9;
    add.s64             %rd11, %rd8, %rd9;
    ld.global.u32       %r7, [%rd10];
    ld.global.u32       %r8, [%rd11];
    add.s32             %r9, %r7, %r8;
    add.s32             %r10, %r9, %r2;
    st.global.u32       [%rd10], %r10;
$L_add_done:
    ret;
}

.visible .entry rp_scale(
    .param .u64 rp_scale_dst,
    .param .u64 rp_scale_src,
    .param .u32 rp_scale_n,
    .param .u32 rp_scale_mul,
    .param .u32 rp_scale_add,
    .param .u64 rp_scale_ns
)
{
    .reg .pred  %p<3>;
    .reg .b32   %r<12>;
    .reg .b64   %rd<14>;

    ld.param.u64        %rd1, [rp_scale_dst];
    ld.param.u64        %rd2, [rp_scale_src];
    ld.param.u32        %r1, [rp_scale_n];
    ld.param.u32        %r2, [rp_scale_mul];
    ld.param.u32        %r3, [rp_scale_add];
    ld.param.u64        %rd3, [rp_scale_ns];
    mov.u32             %r4, %ctaid.x;
    mov.u32             %r5, %ntid.x;
    mov.u32             %r6, %tid.x;
    mad.lo.s32          %r7, %r4, %r5, %r6;
    setp.ge.u32         %p1, %r7, %r1;
    @%p1 bra            $L_scale_done;
    mov.u64             %rd4, %globaltimer;
$L_scale_spin:
    mov.u64             %rd5, %globaltimer;
    sub.u64             %rd6, %rd5, %rd4;
    setp.lt.u64         %p2, %rd6, %rd3;
    @%p2 bra            $L_scale_spin;
    cvta.to.global.u64  %rd7, %rd1;
    cvta.to.global.u64  %rd8, %rd2;
    mul.wide.u32        %rd9, %r7, 4;
    add.s64             %rd10, %rd7, %rd9;
    add.s64             %rd11, %rd8, %rd9;
    ld.global.u32       %r8, [%rd11];
    mad.lo.s32          %r9, %r8, %r2, %r3;
    st.global.u32       [%rd10], %r9;
$L_scale_done:
    ret;
}
"#;

/// The value a kernel leaves in each element of `dst`, from `dst`'s and `src`'s (`None` where
/// a value it reads is undefined).
pub fn apply(k: super::program::Kern, dst: Option<u32>, src: Option<u32>) -> Option<u32> {
    use super::program::Kern;
    match k {
        Kern::Set(v) => Some(v),
        Kern::Add(k) => Some(dst?.wrapping_add(src?).wrapping_add(k)),
        Kern::Scale(m, a) => Some(src?.wrapping_mul(m).wrapping_add(a)),
    }
}
