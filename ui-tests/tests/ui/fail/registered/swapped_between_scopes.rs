// Each scope's registered memory is of a type of its own (`'id` is a brand): two scopes' values
// cannot be swapped, so neither ends with the other's memory.
use cuda_stream::{Context, RegisteredHost};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let (mut a, mut b) = (vec![0u32; 16], vec![0u32; 16]);
    RegisteredHost::scope(&ctx, &mut a, |outer| {
        RegisteredHost::scope(&ctx, &mut b, |inner| {
            std::mem::swap(outer, inner);
        })
    })??;
    Ok(())
}
