//! What the random programs' watchdog prints of a hung program (see `run.rs`).

use super::world::{BufObj, World};

/// What the watchdog prints of a hung program: the crate's locks that are held (with their
/// addresses), each buffer's tracker lock, and each thread's state and system call (a futex
/// wait names the lock's address) from `/proc/self/task`.
pub(super) fn hang_report(world: &World<'_>) -> String {
    let mut out = String::new();
    for l in cuda_stream::lock_report() {
        if l.contains("HELD") || l.starts_with("threads") {
            out += &format!("  {l}\n");
        }
    }
    for (i, b) in world.bufs.iter().enumerate() {
        match b.try_read() {
            Ok(g) => {
                if let BufObj::Own(d) = &*g {
                    out += &format!("  b{i}: {}\n", d.tracker_lock());
                }
            }
            Err(_) => out += &format!("  b{i}: the slot is locked\n"),
        }
    }
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            let read = |f: &str| {
                std::fs::read_to_string(t.path().join(f))
                    .unwrap_or_default()
                    .trim()
                    .to_string()
            };
            let stat = read("stat");
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next())
                .unwrap_or("?")
                .to_string();
            out += &format!(
                "  task {} ({}) {state} wchan {} syscall {}\n",
                t.file_name().to_string_lossy(),
                read("comm"),
                read("wchan"),
                read("syscall")
            );
        }
    }
    out
}
