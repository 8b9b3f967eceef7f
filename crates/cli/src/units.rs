//! The one parser of byte sizes ("4M", "64K", "1G") and of numbers every `dqplb` command uses,
//! as clap value parsers and for the simulator's `[fabric.sim]` keys.

use std::fmt::Display;
use std::str::FromStr;

/// A byte count: "4096", "64K", "1M", "2G" (binary multiples, case-insensitive; an optional
/// "B", "b" or "iB" after the suffix; blanks around the number ignored).
pub(crate) fn bytes(s: &str) -> Result<u64, String> {
    let bad = || format!("'{s}' is not a byte count (examples: 8, 64K, 1M, 2G)");
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(t);
    let (digits, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = digits.trim().parse().map_err(|_| bad())?;
    n.checked_mul(mult).ok_or_else(bad)
}

/// A number of type `T` (blanks around it ignored).
pub(crate) fn num<T: FromStr>(s: &str) -> Result<T, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a valid number"))
}

/// A number of type `T` in `lo ..= hi`, as a clap value parser.
pub(crate) fn ranged<T>(lo: T, hi: T) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync
where
    T: FromStr + PartialOrd + Display + Copy + Send + Sync + 'static,
{
    move |s| {
        let x: T = num(s)?;
        if x < lo || x > hi {
            return Err(format!("{x} is outside {lo}..={hi}"));
        }
        Ok(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_suffixes() {
        assert_eq!(bytes("8"), Ok(8));
        assert_eq!(bytes("64K"), Ok(65536));
        assert_eq!(bytes("1m"), Ok(1 << 20));
        assert_eq!(bytes("4M"), Ok(4 << 20));
        assert_eq!(bytes("1G"), Ok(1 << 30));
        assert_eq!(bytes("2GiB"), Ok(2 << 30));
        assert_eq!(bytes("3KB"), Ok(3072));
        assert_eq!(bytes(" 128 K "), Ok(128 << 10));
        for bad in [
            "1T",
            "-1",
            "",
            "K",
            "1.5M",
            "99999999999999999999G",
            "17179869184G",
        ] {
            assert_eq!(
                bytes(bad),
                Err(format!(
                    "'{bad}' is not a byte count (examples: 8, 64K, 1M, 2G)"
                )),
                "{bad}"
            );
        }
    }

    #[test]
    fn numbers_and_ranges() {
        assert_eq!(num::<u32>(" 7 "), Ok(7));
        assert_eq!(num::<f64>("0.5"), Ok(0.5));
        assert_eq!(
            num::<u64>("-1"),
            Err("'-1' is not a valid number".to_string())
        );
        assert_eq!(
            num::<u8>("256"),
            Err("'256' is not a valid number".to_string())
        );
        let qps = ranged(1u32, 128);
        assert_eq!(qps("128"), Ok(128));
        assert_eq!(qps("0"), Err("0 is outside 1..=128".to_string()));
        assert_eq!(qps("x"), Err("'x' is not a valid number".to_string()));
    }
}
