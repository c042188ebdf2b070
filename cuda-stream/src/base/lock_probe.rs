//! For this workspace's tests (feature `test-hooks`): which of the crate's locks are held, with
//! their addresses, so that a test driver's watchdog can tell which lock a hung thread waits on
//! (its futex address, in `/proc/self/task/*/syscall`).

use std::sync::{Mutex, TryLockError};

/// `name`, the lock's address range and whether another holder has it (`try_lock`).
pub(crate) fn probe<T>(out: &mut Vec<String>, name: &str, m: &Mutex<T>) {
    let held = matches!(m.try_lock(), Err(TryLockError::WouldBlock));
    out.push(format!(
        "{name} {:#x}+{} {}",
        m as *const Mutex<T> as usize,
        size_of_val(m),
        if held { "HELD" } else { "free" }
    ));
}
