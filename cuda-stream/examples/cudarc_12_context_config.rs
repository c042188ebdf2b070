//! cudarc's `12-context-config`: reads the context's limits and cache preference, doubles the
//! stack size and prefers shared memory, then restores both. Here limits and cache preferences
//! are typed enums (cudarc takes raw `CUlimit`s), and free and total memory come with them.

use std::process::ExitCode;

use cuda_stream::ffi::CUresult;
use cuda_stream::{CacheConfig, Context, Error, Limit};

mod common;

const NAME: &str = "cudarc_12_context_config";

fn run() -> Result<String, Error> {
    let ctx = Context::primary(0)?;

    // The context's limits.
    let stack_size = ctx.limit(Limit::StackSize)?;
    let malloc_heap_size = ctx.limit(Limit::MallocHeapSize)?;
    let printf_fifo_size = ctx.limit(Limit::PrintfFifoSize)?;
    // The device runtime's limits, which a device may lack (an H100 has no sync depth: there
    // cudarc's `get_limit(..)?` fails the whole example).
    let device_runtime = |limit| match ctx.limit(limit) {
        Err(e) if e.driver_code() == Some(CUresult::CUDA_ERROR_UNSUPPORTED_LIMIT) => {
            Ok("unsupported".to_string())
        }
        other => other.map(|v| v.to_string()),
    };
    let sync_depth = device_runtime(Limit::DevRuntimeSyncDepth)?;
    let pending_launches = device_runtime(Limit::DevRuntimePendingLaunchCount)?;
    assert!(stack_size > 0 && malloc_heap_size > 0 && printf_fifo_size > 0);

    // The cache preference: the match is exhaustive, with no raw value to fall through.
    let cache_config = ctx.cache_config()?;
    let cache_str = match cache_config {
        CacheConfig::PreferNone => "no preference",
        CacheConfig::PreferShared => "prefer shared memory",
        CacheConfig::PreferL1 => "prefer L1 cache",
        CacheConfig::PreferEqual => "equal L1/shared",
    };

    // Double the stack size (the driver may round it up), then restore it.
    let new_stack_size = stack_size * 2;
    ctx.set_limit(Limit::StackSize, new_stack_size)?;
    let updated_stack_size = ctx.limit(Limit::StackSize)?;
    assert!(
        updated_stack_size >= new_stack_size,
        "{updated_stack_size} < {new_stack_size}"
    );
    ctx.set_limit(Limit::StackSize, stack_size)?;
    assert_eq!(ctx.limit(Limit::StackSize)?, stack_size);

    // Prefer shared memory, then restore the preference.
    ctx.set_cache_config(CacheConfig::PreferShared)?;
    assert_eq!(ctx.cache_config()?, CacheConfig::PreferShared);
    ctx.set_cache_config(cache_config)?;
    assert_eq!(ctx.cache_config()?, cache_config);

    let mem = ctx.memory_info()?;
    assert!(mem.total > 0 && mem.free <= mem.total);
    Ok(format!(
        "stack {stack_size} B (doubled to {updated_stack_size} and restored), malloc heap \
         {malloc_heap_size} B, printf FIFO {printf_fifo_size} B, sync depth {sync_depth}, \
         {pending_launches} pending launches; cache: {cache_str} (set to prefer shared and \
         restored); {} of {} MiB free",
        mem.free >> 20,
        mem.total >> 20
    ))
}

fn main() -> ExitCode {
    common::main(NAME, 1, run)
}
