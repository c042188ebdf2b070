//! Stream priorities: the range a context allows. A plain value type at the bottom of the crate,
//! so that the error type can name it; [`PriorityRange::check`], which returns an error, is added
//! by `driver::context`, one layer up.

use std::fmt;

/// The priorities a context's streams may have. CUDA counts down: `greatest` is numerically the
/// smallest (for example -5) and `least` the largest (usually 0, the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PriorityRange {
    least: i32,
    greatest: i32,
}

impl fmt::Display for PriorityRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {}] (greatest to least)", self.greatest, self.least)
    }
}

impl PriorityRange {
    /// A range from its two ends, as `cuCtxGetStreamPriorityRange` reports them.
    pub fn new(least: i32, greatest: i32) -> PriorityRange {
        PriorityRange { least, greatest }
    }
    /// The lowest priority (numerically largest; the default priority).
    pub fn least(self) -> i32 {
        self.least
    }
    /// The highest priority (numerically smallest).
    pub fn greatest(self) -> i32 {
        self.greatest
    }
    /// Whether `priority` is in the range.
    pub fn contains(self, priority: i32) -> bool {
        (self.greatest..=self.least).contains(&priority)
    }
    /// The nearest priority in the range.
    pub fn clamp(self, priority: i32) -> i32 {
        priority.clamp(self.greatest, self.least)
    }
}
