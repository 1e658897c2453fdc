//! Parsing of `Retry-After` and `retry-after-ms`, the server's hint of how long to wait
//! before the next attempt.
//!
//! [`parse_retry_after`] reads two headers:
//!
//! - **`retry-after-ms`** ([`RETRY_AFTER_MS`]), the non-standard header sent by
//!   OpenAI and Azure: a delay in milliseconds, fractions allowed (`250`, `1500.5`).
//!   When it holds a valid value it takes precedence over `Retry-After`, because it
//!   is the more precise of the two.
//! - **`Retry-After`** (RFC 9110 §10.2.3): either delay-seconds (`120`; a fraction
//!   such as `1.5` is tolerated) or an HTTP-date in any of the three forms a
//!   recipient must accept — IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the
//!   obsolete RFC 850 form (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime
//!   (`Sun Nov  6 08:49:37 1994`). All three are parsed by `httpdate`. A date
//!   yields `date - now`; a date in the past yields zero.
//!
//! The rules, chosen so that nothing a server sends can panic or mislead:
//!
//! - **Numbers** must match `1*DIGIT [ "." 1*DIGIT ]` after trimming ASCII
//!   whitespace. Signs (`-1`, `+1`), exponents (`1e3`), `NaN`, `inf`, hex, digit
//!   separators, a bare `.5` or `5.`, lists (`120, 60`), non-ASCII digits and any
//!   other text are *invalid*: neither header's grammar allows them and reading
//!   `1e3` as 1 or as 1000 would be a guess. No floating point is involved;
//!   fractions are truncated to whole nanoseconds.
//! - **Huge values** never overflow: every hint is clamped to `MAX_HINT` (365
//!   days), whether it is a number with many digits or a date in year 9999. The
//!   caller compares the hint against its own, much smaller, cap, so the clamp keeps
//!   the meaning "too long" while leaving room for later arithmetic. Values between
//!   the caller's cap and `MAX_HINT` (e.g. `86400`) are returned as they are.
//! - **Invalid values** (garbage, empty, negative, non-UTF-8 or non-ASCII bytes,
//!   a date whose weekday contradicts it, a date before 1970) count as absent:
//!   an invalid `retry-after-ms` falls back to `Retry-After`, and if that is
//!   invalid too the result is `None`.
//! - **Several lines of one header** (which a conforming server never sends) are
//!   resolved by taking the **largest** valid value, the most conservative reading
//!   of what the server asked for; invalid lines are skipped. The same rule applies
//!   between seconds and dates mixed in several `Retry-After` lines.
//! - Two-digit RFC 850 years are read the way `httpdate` reads them (`70`–`99` as
//!   19xx, `00`–`69` as 20xx); such a date is either long past (zero) or fails
//!   `httpdate`'s weekday check (invalid), never a panic.
//!
//! Parsing works on the header bytes and does not allocate.

use std::time::{Duration, SystemTime};

use http::header::RETRY_AFTER;
use http::{HeaderMap, HeaderName, HeaderValue};

/// The name of the `retry-after-ms` header: the non-standard delay in milliseconds
/// sent by OpenAI and Azure, which takes precedence over `Retry-After` when valid.
pub const RETRY_AFTER_MS: &str = "retry-after-ms";

/// [`RETRY_AFTER_MS`] as a header name, so a lookup does not parse it each time.
const RETRY_AFTER_MS_NAME: HeaderName = HeaderName::from_static(RETRY_AFTER_MS);

/// The largest hint [`parse_retry_after`] returns: 365 days.
///
/// Larger numbers and dates further ahead are clamped to this, so a hint never
/// overflows the caller's arithmetic yet still exceeds any sane retry cap.
pub(crate) const MAX_HINT: Duration = Duration::from_secs(365 * 24 * 60 * 60);

const NANOS_PER_SEC: u64 = 1_000_000_000;
const NANOS_PER_MILLI: u64 = 1_000_000;

/// The server's wait hint, if any header holds a valid one.
///
/// - A valid `retry-after-ms` ([`RETRY_AFTER_MS`]: milliseconds, fractions allowed,
///   e.g. `1500.5`) takes precedence over `Retry-After`.
/// - Otherwise `Retry-After` (RFC 9110 §10.2.3) is read as delay-seconds (`120`, or
///   a fraction such as `1.5`) or as an HTTP-date in IMF-fixdate, RFC 850 or asctime
///   form, giving `date - now`; a date in the past gives [`Duration::ZERO`].
/// - Numbers must be `1*DIGIT [ "." 1*DIGIT ]` once ASCII whitespace is trimmed;
///   signs, exponents (`1e3`), `NaN`, `inf` and other text are invalid. Fractions
///   are truncated to whole nanoseconds.
/// - An invalid value (garbage, empty, negative, non-ASCII bytes) counts as absent:
///   an invalid `retry-after-ms` falls back to `Retry-After`, then to `None`.
/// - When a header appears on several lines, the **largest** valid value wins, the
///   most conservative reading of what the server asked for.
/// - Every result is clamped to 365 days, so a huge number or a far-off date never
///   overflows later arithmetic yet still exceeds any sane retry cap. Values above
///   the caller's own cap (e.g. `86400`) are returned as they are.
///
/// Never panics, and does not allocate.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
///
/// use backstop::policy::{parse_retry_after, RETRY_AFTER_MS};
/// use http::header::{HeaderMap, HeaderValue, RETRY_AFTER};
///
/// // 90 seconds before Sun, 06 Nov 1994 08:49:37 GMT.
/// let now = UNIX_EPOCH + Duration::from_secs(784_111_777 - 90);
/// let mut headers = HeaderMap::new();
/// assert_eq!(parse_retry_after(&headers, now), None);
///
/// headers.insert(RETRY_AFTER, HeaderValue::from_static("120"));
/// assert_eq!(parse_retry_after(&headers, now), Some(Duration::from_secs(120)));
///
/// headers.insert(RETRY_AFTER, HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"));
/// assert_eq!(parse_retry_after(&headers, now), Some(Duration::from_secs(90)));
///
/// // A valid `retry-after-ms` takes precedence...
/// headers.insert(RETRY_AFTER_MS, HeaderValue::from_static("1500.5"));
/// assert_eq!(parse_retry_after(&headers, now), Some(Duration::from_micros(1_500_500)));
///
/// // ...and an invalid one falls back to `Retry-After`.
/// headers.insert(RETRY_AFTER_MS, HeaderValue::from_static("soon"));
/// assert_eq!(parse_retry_after(&headers, now), Some(Duration::from_secs(90)));
/// ```
pub fn parse_retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    headers
        .get_all(&RETRY_AFTER_MS_NAME)
        .iter()
        .filter_map(parse_ms_value)
        .max()
        .or_else(|| {
            headers
                .get_all(RETRY_AFTER)
                .iter()
                .filter_map(|value| parse_retry_after_value(value, now))
                .max()
        })
}

/// One `retry-after-ms` line: decimal milliseconds.
fn parse_ms_value(value: &HeaderValue) -> Option<Duration> {
    parse_decimal(value.as_bytes().trim_ascii(), NANOS_PER_MILLI)
}

/// One `Retry-After` line: decimal seconds or an HTTP-date.
fn parse_retry_after_value(value: &HeaderValue, now: SystemTime) -> Option<Duration> {
    let bytes = value.as_bytes().trim_ascii();
    if bytes.first()?.is_ascii_digit() {
        return parse_decimal(bytes, NANOS_PER_SEC);
    }
    // Every HTTP-date form starts with a day name; `httpdate` rejects non-ASCII.
    let date = httpdate::parse_http_date(std::str::from_utf8(bytes).ok()?).ok()?;
    Some(
        date.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(MAX_HINT),
    )
}

/// Parses `1*DIGIT [ "." 1*DIGIT ]` as a count of units of `unit_nanos`
/// nanoseconds, truncated to whole nanoseconds and clamped to [`MAX_HINT`].
fn parse_decimal(bytes: &[u8], unit_nanos: u64) -> Option<Duration> {
    let (whole, fraction) = match bytes.iter().position(|&b| b == b'.') {
        Some(dot) => (&bytes[..dot], Some(&bytes[dot + 1..])),
        None => (bytes, None),
    };
    let all_digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    if !all_digits(whole) || fraction.is_some_and(|f| !all_digits(f)) {
        return None;
    }

    // Saturates rather than overflows; anything near u64::MAX is clamped below.
    let whole = whole.iter().fold(0u64, |acc, &d| {
        acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    });
    // The fraction in billionths of a unit; digits past the ninth are dropped.
    let mut billionths = 0u64;
    let mut scale = NANOS_PER_SEC / 10;
    for &d in fraction.unwrap_or_default().iter().take(9) {
        billionths += u64::from(d - b'0') * scale;
        scale /= 10;
    }

    let unit = u128::from(unit_nanos);
    let nanos =
        u128::from(whole) * unit + u128::from(billionths) * unit / u128::from(NANOS_PER_SEC);
    Some(u64::try_from(nanos.min(MAX_HINT.as_nanos())).map_or(MAX_HINT, Duration::from_nanos))
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use http::header::HeaderName;
    use proptest::prelude::*;

    use super::*;

    const RA: &str = "retry-after";
    const MS: &str = RETRY_AFTER_MS;

    /// Sun, 06 Nov 1994 08:49:37 GMT, the RFC's example date.
    const EXAMPLE_DATE_SECS: u64 = 784_111_777;

    /// 90 seconds before the example date.
    fn before_example() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(EXAMPLE_DATE_SECS - 90)
    }

    fn headers(lines: &[(&str, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for &(name, value) in lines {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(value).unwrap(),
            );
        }
        map
    }

    fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    fn millis(ms: u64) -> Option<Duration> {
        Some(Duration::from_millis(ms))
    }

    /// A table row: name, header lines, `now`, expected hint.
    type Case<'a> = (
        &'a str,
        &'a [(&'a str, &'a [u8])],
        SystemTime,
        Option<Duration>,
    );

    #[test]
    fn table() {
        let now = before_example();
        let past = UNIX_EPOCH + Duration::from_secs(EXAMPLE_DATE_SECS + 1_000);
        #[rustfmt::skip]
        let cases: &[Case<'_>] = &[
            ("no header", &[], now, None),
            // delay-seconds
            ("seconds", &[(RA, b"120")], now, secs(120)),
            ("zero", &[(RA, b"0")], now, secs(0)),
            ("leading zeros", &[(RA, b"007")], now, secs(7)),
            ("fractional seconds", &[(RA, b"1.5")], now, millis(1_500)),
            ("fraction past nanoseconds", &[(RA, b"0.0000000019")], now, Some(Duration::from_nanos(1))),
            ("whitespace", &[(RA, b" \t120 \t")], now, secs(120)),
            ("over any cap, as is", &[(RA, b"86400")], now, secs(86_400)),
            ("exactly MAX_HINT", &[(RA, b"31536000")], now, Some(MAX_HINT)),
            ("just over MAX_HINT", &[(RA, b"31536000.5")], now, Some(MAX_HINT)),
            ("huge, clamped", &[(RA, b"99999999999999999999999")], now, Some(MAX_HINT)),
            ("huge fraction, clamped", &[(RA, b"99999999999999999999999.999")], now, Some(MAX_HINT)),
            // invalid numbers and garbage
            ("negative", &[(RA, b"-1")], now, None),
            ("negative zero", &[(RA, b"-0")], now, None),
            ("plus sign", &[(RA, b"+5")], now, None),
            ("garbage", &[(RA, b"abc")], now, None),
            ("empty", &[(RA, b"")], now, None),
            ("blank", &[(RA, b"   ")], now, None),
            ("exponent", &[(RA, b"1e3")], now, None),
            ("NaN", &[(RA, b"NaN")], now, None),
            ("inf", &[(RA, b"inf")], now, None),
            ("Infinity", &[(RA, b"Infinity")], now, None),
            ("bare fraction", &[(RA, b".5")], now, None),
            ("trailing dot", &[(RA, b"5.")], now, None),
            ("two dots", &[(RA, b"1.5.5")], now, None),
            ("hex", &[(RA, b"0x10")], now, None),
            ("digit separator", &[(RA, b"1,000")], now, None),
            ("list", &[(RA, b"120, 60")], now, None),
            ("inner space", &[(RA, b"1 20")], now, None),
            ("unit suffix", &[(RA, b"120s")], now, None),
            ("fullwidth digits", &[(RA, "１２０".as_bytes())], now, None),
            ("non-UTF-8", &[(RA, b"12\xff")], now, None),
            ("non-UTF-8 only", &[(RA, b"\xff\xfe")], now, None),
            // HTTP-dates
            ("IMF-fixdate, past", &[(RA, b"Sun, 06 Nov 1994 08:49:37 GMT")], past, secs(0)),
            ("IMF-fixdate, now", &[(RA, b"Sun, 06 Nov 1994 08:49:37 GMT")], UNIX_EPOCH + Duration::from_secs(EXAMPLE_DATE_SECS), secs(0)),
            ("IMF-fixdate, future", &[(RA, b"Sun, 06 Nov 1994 08:49:37 GMT")], now, secs(90)),
            ("IMF-fixdate, sub-second now", &[(RA, b"Sun, 06 Nov 1994 08:49:37 GMT")], now + Duration::from_millis(250), millis(89_750)),
            ("IMF-fixdate, whitespace", &[(RA, b"  Sun, 06 Nov 1994 08:49:37 GMT\t")], now, secs(90)),
            ("RFC 850, future", &[(RA, b"Sunday, 06-Nov-94 08:49:37 GMT")], now, secs(90)),
            ("RFC 850, past", &[(RA, b"Sunday, 06-Nov-94 08:49:37 GMT")], past, secs(0)),
            ("asctime, future", &[(RA, b"Sun Nov  6 08:49:37 1994")], now, secs(90)),
            ("asctime, past", &[(RA, b"Sun Nov  6 08:49:37 1994")], past, secs(0)),
            ("epoch, past", &[(RA, b"Thu, 01 Jan 1970 00:00:00 GMT")], now, secs(0)),
            ("year 9999, clamped", &[(RA, b"Fri, 31 Dec 9999 23:59:59 GMT")], now, Some(MAX_HINT)),
            ("wrong weekday", &[(RA, b"Mon, 06 Nov 1994 08:49:37 GMT")], now, None),
            ("lowercase names", &[(RA, b"sun, 06 nov 1994 08:49:37 gmt")], now, None),
            ("not GMT", &[(RA, b"Sun, 06 Nov 1994 08:49:37 PST")], now, None),
            ("February 30", &[(RA, b"Wed, 30 Feb 1994 08:49:37 GMT")], now, None),
            ("before 1970", &[(RA, b"Wed, 31 Dec 1969 23:59:59 GMT")], now, None),
            ("truncated date", &[(RA, b"Sun, 06 Nov 1994")], now, None),
            // retry-after-ms
            ("ms", &[(MS, b"250")], now, millis(250)),
            ("ms fractional", &[(MS, b"250.5")], now, Some(Duration::from_micros(250_500))),
            ("ms 1500.5", &[(MS, b"1500.5")], now, Some(Duration::from_micros(1_500_500))),
            ("ms zero", &[(MS, b"0")], now, millis(0)),
            ("ms whitespace", &[(MS, b" 250 ")], now, millis(250)),
            ("ms huge, clamped", &[(MS, b"99999999999999999999999")], now, Some(MAX_HINT)),
            ("ms mixed-case name", &[("Retry-After-MS", b"250")], now, millis(250)),
            ("ms beats Retry-After", &[(RA, b"120"), (MS, b"250")], now, millis(250)),
            ("ms zero beats Retry-After", &[(MS, b"0"), (RA, b"120")], now, millis(0)),
            ("ms beats a date", &[(RA, b"Sun, 06 Nov 1994 08:49:37 GMT"), (MS, b"250")], now, millis(250)),
            ("ms garbage falls back", &[(MS, b"abc"), (RA, b"120")], now, secs(120)),
            ("ms negative falls back", &[(MS, b"-5"), (RA, b"3")], now, secs(3)),
            ("ms empty falls back", &[(MS, b""), (RA, b"3")], now, secs(3)),
            ("ms non-UTF-8 falls back", &[(MS, b"\xe2\x82\xac"), (RA, b"3")], now, secs(3)),
            ("ms garbage, no Retry-After", &[(MS, b"abc")], now, None),
            ("both garbage", &[(MS, b"abc"), (RA, b"abc")], now, None),
            ("ms is not a date", &[(MS, b"Sun, 06 Nov 1994 08:49:37 GMT"), (RA, b"3")], now, secs(3)),
            // several lines: the largest valid value wins
            ("two Retry-After, larger last", &[(RA, b"5"), (RA, b"120")], now, secs(120)),
            ("two Retry-After, larger first", &[(RA, b"120"), (RA, b"5")], now, secs(120)),
            ("Retry-After garbage then valid", &[(RA, b"abc"), (RA, b"7")], now, secs(7)),
            ("Retry-After non-UTF-8 then valid", &[(RA, b"\xff"), (RA, b"30")], now, secs(30)),
            ("Retry-After date beats seconds", &[(RA, b"60"), (RA, b"Sun, 06 Nov 1994 08:49:37 GMT")], now, secs(90)),
            ("Retry-After seconds beat date", &[(RA, b"Sun, 06 Nov 1994 08:49:37 GMT"), (RA, b"120")], now, secs(120)),
            ("two ms", &[(MS, b"250"), (MS, b"100")], now, millis(250)),
            ("ms garbage then valid", &[(MS, b"x"), (MS, b"100"), (RA, b"9")], now, millis(100)),
        ];
        for (name, lines, now, expected) in cases {
            assert_eq!(
                parse_retry_after(&headers(lines), *now),
                *expected,
                "case {name:?}: {lines:?}",
            );
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(
            ra in proptest::collection::vec(any::<u8>(), 0..48),
            ms in proptest::collection::vec(any::<u8>(), 0..48),
            now_secs in 0u64..20_000_000_000,
        ) {
            let now = UNIX_EPOCH + Duration::from_secs(now_secs);
            let mut map = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_bytes(&ra) {
                map.append(RETRY_AFTER, v);
            }
            if let Ok(v) = HeaderValue::from_bytes(&ms) {
                map.append(RETRY_AFTER_MS, v);
            }
            if let Some(d) = parse_retry_after(&map, now) {
                prop_assert!(d <= MAX_HINT);
            }
        }

        #[test]
        fn arbitrary_strings_never_panic(
            value in any::<String>(),
            numberish in r"[ \t+-]?[0-9]{0,30}(\.[0-9]{0,30})?([eE][+-]?[0-9]{1,3})?[ \t]?",
            header in prop_oneof![Just(RA), Just(MS)],
            now_secs in 0u64..20_000_000_000,
        ) {
            let now = UNIX_EPOCH + Duration::from_secs(now_secs);
            for v in [&value, &numberish] {
                if let Ok(v) = HeaderValue::from_str(v) {
                    let mut map = HeaderMap::new();
                    map.insert(header, v);
                    if let Some(d) = parse_retry_after(&map, now) {
                        prop_assert!(d <= MAX_HINT);
                    }
                }
            }
        }

        #[test]
        fn seconds_round_trip(n in 0u64..=MAX_HINT.as_secs(), frac in 0u32..1000) {
            let mut map = HeaderMap::new();
            map.insert(RETRY_AFTER, HeaderValue::from_str(&format!("{n}.{frac:03}")).unwrap());
            let expected = Duration::from_secs(n) + Duration::from_millis(frac.into());
            prop_assert_eq!(parse_retry_after(&map, UNIX_EPOCH), Some(expected.min(MAX_HINT)));
        }

        #[test]
        fn dates_round_trip(now_secs in 0u64..5_000_000_000, ahead in 0u64..2 * MAX_HINT.as_secs()) {
            let now = UNIX_EPOCH + Duration::from_secs(now_secs);
            let date = httpdate::fmt_http_date(now + Duration::from_secs(ahead));
            let mut map = HeaderMap::new();
            map.insert(RETRY_AFTER, HeaderValue::from_str(&date).unwrap());
            prop_assert_eq!(
                parse_retry_after(&map, now),
                Some(Duration::from_secs(ahead).min(MAX_HINT)),
            );
        }
    }
}
