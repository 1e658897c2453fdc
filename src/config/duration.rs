//! Durations as configuration files write them: `"250ms"`, `"1.5s"`, `"2m"`,
//! `"1h30m"`. One reader serves backstop's own format, gRPC's proto-JSON durations
//! (`"0.1s"`, `"1.000340012s"`) and Gateway API's (`"1h2m3s4ms"`, GEP-2257).

use std::time::Duration;

/// The longest text read as a duration: anything longer is refused unread.
const MAX_LEN: usize = 64;

/// Reads `text` as a duration: one or more `<number><unit>` parts, largest unit
/// first, where a number is decimal (`1`, `0.25`, `.5`) and a unit one of `h`,
/// `m`, `s`, `ms`, `us` (or `µs`) and `ns`. Spaces around the whole are allowed,
/// none inside.
///
/// # Errors
///
/// A message saying what is wrong (without repeating the text): an empty text, a
/// part without a number or a unit, an unknown unit, units out of order or
/// repeated, or a value over about 584 years.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::config::parse_duration;
///
/// assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
/// assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
/// assert_eq!(parse_duration("0.000000001s"), Ok(Duration::from_nanos(1)));
/// assert!(parse_duration("5 minutes").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("a duration must not be empty (write e.g. \"250ms\", \"1.5s\", \"2m\")".into());
    }
    if text.len() > MAX_LEN {
        return Err(format!("a duration is at most {MAX_LEN} characters"));
    }
    let mut rest = text;
    let mut total: u128 = 0;
    // The rank of the last unit read: each part's unit must be smaller.
    let mut last_rank = usize::MAX;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or("a duration needs a unit after its number (h, m, s, ms, us or ns)")?;
        let (number, after) = rest.split_at(digits);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let (rank, nanos_per) = unit_of(unit)?;
        if rank >= last_rank {
            return Err("a duration's units go from the largest to the smallest, each once".into());
        }
        last_rank = rank;
        total = total
            .checked_add(nanos_of(number, nanos_per)?)
            .ok_or_else(too_long)?;
        rest = next;
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| too_long())?;
    Ok(Duration::new(secs, (total % 1_000_000_000) as u32))
}

/// Writes `d` as [`parse_duration`] reads it, in the largest unit that keeps it
/// exact (`"250ms"`, `"1.5s"` is written `"1500ms"`, `"2m"`).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::config::{format_duration, parse_duration};
///
/// assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
/// assert_eq!(format_duration(Duration::from_secs(120)), "2m");
/// let d = Duration::new(3, 7);
/// assert_eq!(parse_duration(&format_duration(d)), Ok(d));
/// ```
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    for (unit, per) in [
        ("h", 3_600_000_000_000u128),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
    ] {
        if nanos != 0 && nanos.is_multiple_of(per) {
            return format!("{}{unit}", nanos / per);
        }
    }
    format!("{nanos}ns")
}

fn too_long() -> String {
    "a duration must be shorter than 584 years".into()
}

/// A unit's rank (larger units rank higher) and its length in nanoseconds.
fn unit_of(unit: &str) -> Result<(usize, u128), String> {
    Ok(match unit {
        "h" => (5, 3_600_000_000_000),
        "m" => (4, 60_000_000_000),
        "s" => (3, 1_000_000_000),
        "ms" => (2, 1_000_000),
        "us" | "µs" => (1, 1_000),
        "ns" => (0, 1),
        "" => {
            return Err("a duration needs a unit after its number (h, m, s, ms, us or ns)".into())
        }
        _ => return Err("a duration's unit is one of h, m, s, ms, us and ns".into()),
    })
}

/// `number` (decimal, with at most one point) of units of `per` nanoseconds,
/// rounded down to the nanosecond.
fn nanos_of(number: &str, per: u128) -> Result<u128, String> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return Err("a duration's number is written like 250, 1.5 or .5".into());
    }
    let mut nanos: u128 = 0;
    for digit in whole.bytes() {
        nanos = nanos
            .checked_mul(10)
            .and_then(|n| n.checked_add(u128::from(digit - b'0')))
            .ok_or_else(too_long)?;
    }
    nanos = nanos.checked_mul(per).ok_or_else(too_long)?;
    // Each decimal digit is worth a tenth of the one before; past the nanosecond
    // it is worth nothing.
    let mut worth = per;
    for digit in fraction.bytes() {
        worth /= 10;
        if worth == 0 {
            break;
        }
        nanos += u128::from(digit - b'0') * worth;
    }
    Ok(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_formats_write() {
        let cases = [
            ("250ms", Duration::from_millis(250)),
            ("1.5s", Duration::from_millis(1500)),
            ("2m", Duration::from_secs(120)),
            ("0.1s", Duration::from_millis(100)),
            ("1.000340012s", Duration::new(1, 340_012)),
            ("1h2m3s4ms", Duration::new(3723, 4_000_000)),
            (".5s", Duration::from_millis(500)),
            ("10us", Duration::from_micros(10)),
            ("10µs", Duration::from_micros(10)),
            (" 7ns ", Duration::from_nanos(7)),
            ("0s", Duration::ZERO),
            ("1.0000000019s", Duration::new(1, 1)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn refuses_what_is_not_a_duration_without_echoing_it() {
        for text in [
            "",
            "5",
            "s",
            "5 s",
            "5sec",
            "1m1h",
            "1s1s",
            "1..5s",
            "-1s",
            "1e3s",
            "5S",
            "1.s.",
            "99999999999999999999999h",
            &"1".repeat(100),
        ] {
            let err = parse_duration(text).unwrap_err();
            assert!(!err.is_empty());
            if text.len() > 3 {
                assert!(!err.contains(text), "{err} repeats {text}");
            }
        }
    }

    #[test]
    fn writes_what_it_reads() {
        for d in [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_micros(3),
            Duration::from_millis(1500),
            Duration::from_secs(59),
            Duration::from_secs(7200),
            Duration::new(1, 340_012),
            Duration::MAX,
        ] {
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{d:?}");
        }
    }
}
