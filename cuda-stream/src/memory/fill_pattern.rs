//! How `DeviceBuffer::fill` writes a value with the driver's memsets: the widest word (1, 2 or
//! 4 bytes) whose repetition makes the value, or an error for a value that has none.

use std::mem::size_of;
use std::ptr;

use crate::base::error::Error;
use crate::base::plain_data::DeviceCopy;

/// The bytes of `value` (its type has no padding, so every byte is initialised).
pub(super) fn bytes_of<T: DeviceCopy>(value: &T) -> &[u8] {
    // SAFETY: `T: DeviceCopy` has no padding, so all `size_of::<T>()` bytes are initialised;
    // the slice borrows `value`.
    unsafe { std::slice::from_raw_parts(ptr::from_ref(value).cast::<u8>(), size_of::<T>()) }
}

/// The widest memset (1, 2 or 4 bytes) and its word that writes `bytes` of repeated `pattern`,
/// if the pattern repeats every 1, 2 or 4 bytes. It runs on every fill: a value of 4 bytes
/// (`u32`, `f32`, ...) over a multiple of 4 bytes is its own word, a byte is repeated, and other
/// values take the general way, out of line.
#[inline(always)]
pub(super) fn memset_word(pattern: &[u8], bytes: usize) -> Option<(usize, u32)> {
    match *pattern {
        // Any 4 bytes repeat every 4; a 4-byte word is the widest.
        [a, b, c, d] if bytes & 3 == 0 => Some((4, u32::from_le_bytes([a, b, c, d]))),
        [a] if bytes & 3 == 0 => Some((4, u32::from(a) * 0x0101_0101)),
        _ => memset_word_general(pattern, bytes),
    }
}

/// [`memset_word`] for any pattern. Byte comparisons only (no slice comparisons, which call
/// `memcmp`).
#[inline(never)]
fn memset_word_general(pattern: &[u8], bytes: usize) -> Option<(usize, u32)> {
    let n = pattern.len();
    if n == 0 {
        // A zero-sized type: there are no bytes to set.
        return Some((1, 0));
    }
    let repeats = |p: usize| n % p == 0 && (p..n).all(|i| pattern[i] == pattern[i - p]);
    let period = if repeats(1) {
        1
    } else if repeats(2) {
        2
    } else if repeats(4) {
        4
    } else {
        return None;
    };
    let width = if bytes % 4 == 0 {
        4
    } else if period <= 2 && bytes % 2 == 0 {
        2
    } else if period == 1 {
        1
    } else {
        return None;
    };
    // `period` is 1, 2 or 4: a mask, not a division, per byte.
    let mut word = [0u8; 4];
    for (i, b) in word[..width].iter_mut().enumerate() {
        *b = pattern[i & (period - 1)];
    }
    Some((width, u32::from_le_bytes(word)))
}

pub(super) fn unfillable(pattern: &[u8]) -> Error {
    Error::InvalidArgument {
        reason: format!(
            "a {}-byte value whose bytes do not repeat every 1, 2 or 4 bytes cannot be written \
             with memset",
            pattern.len()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::{memset_word, memset_word_general};

    #[test]
    fn memset_words() {
        assert_eq!(memset_word(&[0], 12), Some((4, 0)));
        assert_eq!(memset_word(&[7], 6), Some((2, 0x0707)));
        assert_eq!(memset_word(&[7], 3), Some((1, 7)));
        assert_eq!(memset_word(&[1, 2], 8), Some((4, 0x0201_0201)));
        assert_eq!(memset_word(&[1, 2], 6), Some((2, 0x0201)));
        assert_eq!(memset_word(&[1, 2, 3, 4], 8), Some((4, 0x0403_0201)));
        assert_eq!(memset_word(&0.5f64.to_le_bytes(), 16), None);
        assert_eq!(memset_word(&0f64.to_le_bytes(), 16), Some((4, 0)));
        assert_eq!(
            memset_word(&[1, 2, 1, 2, 1, 2, 1, 2], 16),
            Some((4, 0x0201_0201))
        );
        assert_eq!(memset_word(&[1, 2, 3], 9), None);
        assert_eq!(memset_word(&[1, 2, 3, 4], 6), None);
        assert_eq!(memset_word(&[0, 0, 0, 0], 6), Some((2, 0)));
        assert_eq!(memset_word(&[7], 8), Some((4, 0x0707_0707)));
    }

    #[test]
    fn the_fast_words_are_the_general_ones() {
        for bytes in 0..32 {
            for p in [
                [0u8, 0, 0, 0],
                [1, 2, 3, 4],
                [5, 5, 5, 5],
                [1, 2, 1, 2],
                [9, 9, 9, 8],
            ] {
                assert_eq!(
                    memset_word(&p, bytes),
                    memset_word_general(&p, bytes),
                    "{p:?} over {bytes}"
                );
            }
            for b in [0u8, 7, 255] {
                assert_eq!(memset_word(&[b], bytes), memset_word_general(&[b], bytes));
            }
        }
    }
}
