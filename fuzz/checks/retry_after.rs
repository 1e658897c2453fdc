//! `retry_after`: arbitrary `Retry-After` and `retry-after-ms` lines and an arbitrary
//! "now", read by `backstop::policy::parse_retry_after` and by a second reading of
//! the grammar its docs give, written here from those docs alone:
//!
//! - a number is `1*DIGIT [ "." 1*DIGIT ]` once spaces and tabs are trimmed, read
//!   exactly (decimal digits shifted, never floating point) and truncated to whole
//!   nanoseconds; seconds for `Retry-After`, milliseconds for `retry-after-ms`;
//! - a `Retry-After` date is IMF-fixdate, RFC 850 (two-digit years `70`–`99` as
//!   19xx, `00`–`69` as 20xx) or asctime, with the right weekday, a real day of the
//!   month, a year from 1970 to 9999, no leap second; it gives `date - now`, or zero
//!   for a date that is not ahead;
//! - every hint is clamped to 365 days;
//! - the largest valid `retry-after-ms` wins; without one, the largest valid
//!   `Retry-After`; invalid lines count as absent.
//!
//! Input: the first line is "now" (`[-]SECS[.NANOS]` around the Unix epoch, or any
//! other bytes, which are hashed into one); each further line is a header line, a
//! first byte `m` or `M` making it `retry-after-ms`, anything else `Retry-After`,
//! with the rest of the line as its value.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use backstop::policy::{parse_retry_after, RETRY_AFTER_MS};
use http::header::{HeaderMap, HeaderValue, RETRY_AFTER};

use super::input::Input;

/// 365 days, the documented ceiling.
const MAX_HINT_NANOS: u128 = 365 * 24 * 60 * 60 * 1_000_000_000;

pub fn check(data: &[u8]) {
    let mut input = Input::new(data);
    let (now, now_nanos) = now_of(input.until(b'\n'));
    let mut headers = HeaderMap::new();
    let mut ms_lines = Vec::new();
    let mut ra_lines = Vec::new();
    while !input.is_empty() {
        let line = input.until(b'\n');
        let (is_ms, value) = match line.split_first() {
            Some((b'm' | b'M', rest)) => (true, rest),
            Some((_, rest)) => (false, rest),
            None => continue,
        };
        // Bytes a header value cannot hold never reach the parser.
        let Ok(header) = HeaderValue::from_bytes(value) else {
            continue;
        };
        if is_ms {
            headers.append(RETRY_AFTER_MS, header);
            ms_lines.push(value);
        } else {
            headers.append(RETRY_AFTER, header);
            ra_lines.push(value);
        }
    }

    let got = parse_retry_after(&headers, now);
    let expected = model(&ms_lines, &ra_lines, now_nanos);
    assert_eq!(
        got.map(|d| d.as_nanos()),
        expected,
        "retry-after-ms {ms_lines:?}, Retry-After {ra_lines:?}, now {now_nanos} ns",
    );
    if let Some(hint) = got {
        assert!(hint.as_nanos() <= MAX_HINT_NANOS, "hint over the ceiling");
    }
}

/// "now" as a `SystemTime` and as nanoseconds from the epoch.
fn now_of(line: &[u8]) -> (SystemTime, i128) {
    const LIMIT: u64 = 1 << 40;
    let parsed = (|| {
        let (negative, rest) = match line.split_first() {
            Some((b'-', rest)) => (true, rest),
            _ => (false, line),
        };
        let mut parts = rest.splitn(2, |&b| b == b'.');
        let secs = digits_value(parts.next()?)?;
        let nanos = match parts.next() {
            Some(n) => digits_value(n)? % 1_000_000_000,
            None => 0,
        };
        Some((negative, secs % LIMIT, nanos))
    })();
    let (negative, secs, nanos) = parsed.unwrap_or_else(|| {
        let h = line.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        (h & 1 == 1, (h >> 1) % LIMIT, (h >> 20) % 1_000_000_000)
    });
    let offset = Duration::new(secs, nanos as u32);
    let signed = i128::from(secs) * 1_000_000_000 + i128::from(nanos);
    if negative {
        (UNIX_EPOCH - offset, -signed)
    } else {
        (UNIX_EPOCH + offset, signed)
    }
}

/// A short run of ASCII digits as a number.
fn digits_value(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 18 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// The expected hint in nanoseconds.
fn model(ms_lines: &[&[u8]], ra_lines: &[&[u8]], now: i128) -> Option<u128> {
    ms_lines
        .iter()
        .filter_map(|v| decimal(trim(v), 6))
        .max()
        .or_else(|| {
            ra_lines
                .iter()
                .filter_map(|v| {
                    let v = trim(v);
                    if v.first()?.is_ascii_digit() {
                        decimal(v, 9)
                    } else {
                        let date = date_secs(v)?;
                        let ahead = i128::from(date) * 1_000_000_000 - now;
                        Some((ahead.max(0) as u128).min(MAX_HINT_NANOS))
                    }
                })
                .max()
        })
}

/// Spaces and tabs (the only whitespace a header value holds) trimmed.
fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// `1*DIGIT [ "." 1*DIGIT ]` in units of `10^shift` nanoseconds: the decimal
/// point moved `shift` places right, digits past it dropped, clamped.
fn decimal(v: &[u8], shift: usize) -> Option<u128> {
    let (whole, fraction) = match v.iter().position(|&b| b == b'.') {
        Some(dot) => (&v[..dot], &v[dot + 1..]),
        None => (v, &b"0"[..]),
    };
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    if !digits(whole) || !digits(fraction) {
        return None;
    }
    let mut shifted: Vec<u8> = whole.to_vec();
    for i in 0..shift {
        shifted.push(fraction.get(i).copied().unwrap_or(b'0'));
    }
    let significant: Vec<u8> = shifted.into_iter().skip_while(|&d| d == b'0').collect();
    if significant.len() > 30 {
        return Some(MAX_HINT_NANOS);
    }
    let n = significant
        .iter()
        .fold(0u128, |n, &d| n * 10 + u128::from(d - b'0'));
    Some(n.min(MAX_HINT_NANOS))
}

const SHORT_DAYS: [&[u8]; 7] = [b"Sun", b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat"];
const LONG_DAYS: [&[u8]; 7] = [
    b"Sunday",
    b"Monday",
    b"Tuesday",
    b"Wednesday",
    b"Thursday",
    b"Friday",
    b"Saturday",
];
const MONTHS: [&[u8]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// A fixed-width run of digits.
fn num(s: &[u8]) -> Option<u32> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0, |n, &d| n * 10 + u32::from(d - b'0')))
}

fn index_of(names: &[&[u8]], s: &[u8]) -> Option<usize> {
    names.iter().position(|&n| n == s)
}

/// `HH:MM:SS`.
fn time(s: &[u8]) -> Option<(u32, u32, u32)> {
    match s {
        [h1, h2, b':', m1, m2, b':', s1, s2] => {
            Some((num(&[*h1, *h2])?, num(&[*m1, *m2])?, num(&[*s1, *s2])?))
        }
        _ => None,
    }
}

/// The seconds since the epoch of an HTTP-date in one of its three forms.
fn date_secs(v: &[u8]) -> Option<u64> {
    // Non-ASCII bytes anywhere make the value invalid, even where a form's
    // separator is not looked at.
    if !v.is_ascii() {
        return None;
    }
    // (weekday, day, month 0-based, year, time)
    let (wday, day, month, year, t) = if let Some(comma) = v.iter().position(|&b| b == b',') {
        let (name, rest) = (&v[..comma], &v[comma + 1..]);
        if rest.len() == 25 && name.len() == 3 {
            // IMF-fixdate: `, DD Mon YYYY HH:MM:SS GMT`
            if rest[0] != b' ' || rest[3] != b' ' || rest[7] != b' ' || rest[12] != b' ' {
                return None;
            }
            if &rest[21..] != b" GMT" {
                return None;
            }
            (
                index_of(&SHORT_DAYS, name)?,
                num(&rest[1..3])?,
                index_of(&MONTHS, &rest[4..7])?,
                num(&rest[8..12])?,
                time(&rest[13..21])?,
            )
        } else if rest.len() == 23 {
            // RFC 850: `, DD-Mon-YY HH:MM:SS GMT`. httpdate does not look at the
            // byte between the year and the time; backstop takes that reading.
            if rest[0] != b' ' || rest[3] != b'-' || rest[7] != b'-' || &rest[19..] != b" GMT" {
                return None;
            }
            let yy = num(&rest[8..10])?;
            (
                index_of(&LONG_DAYS, name)?,
                num(&rest[1..3])?,
                index_of(&MONTHS, &rest[4..7])?,
                if yy < 70 { 2000 + yy } else { 1900 + yy },
                time(&rest[11..19])?,
            )
        } else {
            return None;
        }
    } else {
        // asctime: `Www Mon DD HH:MM:SS YYYY`, the day a digit after a space or two digits.
        if v.len() != 24 || v[3] != b' ' || v[7] != b' ' || v[10] != b' ' || v[19] != b' ' {
            return None;
        }
        let day = match &v[8..10] {
            [b' ', d] => num(&[*d])?,
            two => num(two)?,
        };
        (
            index_of(&SHORT_DAYS, &v[..3])?,
            day,
            index_of(&MONTHS, &v[4..7])?,
            num(&v[20..24])?,
            time(&v[11..19])?,
        )
    };
    let (hour, min, sec) = t;
    if !(1970..=9999).contains(&year) || hour > 23 || min > 59 || sec > 59 {
        return None;
    }
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let lengths = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if day == 0 || day > lengths[month] {
        return None;
    }
    // Days from 1970-01-01, counted year by year in 400-year blocks.
    let mut days: u64 = 0;
    let mut y = 1970;
    while y + 400 <= year {
        days += 146_097;
        y += 400;
    }
    while y < year {
        let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        days += if leap { 366 } else { 365 };
        y += 1;
    }
    days += lengths[..month].iter().map(|&d| u64::from(d)).sum::<u64>();
    days += u64::from(day - 1);
    // 1970-01-01 was a Thursday.
    if (days + 4) % 7 != wday as u64 {
        return None;
    }
    Some(days * 86_400 + u64::from(hour) * 3_600 + u64::from(min) * 60 + u64::from(sec))
}
