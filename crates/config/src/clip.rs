//! Cuts text echoed in messages (an NCCL_IB_HCA entry, an environment value, a key) to a
//! readable length: the first 64 characters and "... (N bytes)".

use std::borrow::Cow;

/// Characters of an echoed value kept before it is cut.
pub const ECHO_CHARS: usize = 64;

/// `s` itself when it has at most [`ECHO_CHARS`] characters, else its first 64 characters
/// followed by "... (N bytes)" with N the length of the whole value.
pub fn clip(s: &str) -> Cow<'_, str> {
    match s.char_indices().nth(ECHO_CHARS) {
        None => Cow::Borrowed(s),
        Some((cut, _)) => Cow::Owned(format!("{}... ({} bytes)", &s[..cut], s.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut_with_their_length() {
        assert_eq!(clip("mlx5_0"), "mlx5_0");
        let exact = "x".repeat(64);
        assert_eq!(clip(&exact), exact);
        let long = "é".repeat(100);
        let c = clip(&long);
        assert_eq!(c, format!("{}... (200 bytes)", "é".repeat(64)));
    }
}
