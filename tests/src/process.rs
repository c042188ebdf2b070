//! Host-side measurements: resident memory, and MiB for printing.

/// The process's resident set size in bytes (`VmRSS` of `/proc/self/status`).
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS line");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmRSS value");
    kb * 1024
}

/// Mebibytes, for printing.
pub fn mib(bytes: i128) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
