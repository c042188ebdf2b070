// The registered memory is lent to the closure only: it cannot be kept past the scope, which
// unregisters it.
use cuda_stream::{Context, RegisteredHost};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let mut data = vec![0.0f32; 16];
    let kept = RegisteredHost::scope(&ctx, &mut data, |host| host)?;
    println!("{}", kept.len());
    Ok(())
}
