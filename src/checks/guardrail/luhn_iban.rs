//! Checksums that turn "looks like a number" into "is a card number" or "is an IBAN".
//! Without them one random 16-digit number in ten would be redacted as a card.

/// Luhn (ISO/IEC 7812) over ASCII digits; anything else is not a card number.
pub(crate) fn luhn_valid(digits: &[u8]) -> bool {
    if digits.is_empty() {
        return false;
    }
    let mut sum = 0u32;
    for (i, &c) in digits.iter().rev().enumerate() {
        if !c.is_ascii_digit() {
            return false;
        }
        let mut d = u32::from(c - b'0');
        if i % 2 == 1 {
            d *= 2;
            if d > 9 {
                d -= 9;
            }
        }
        sum += d;
    }
    sum.is_multiple_of(10)
}

/// IBAN length per country (SWIFT IBAN registry). A country not listed is not matched: a real
/// IBAN always has its country's exact length, and the length cuts off trailing words.
const IBAN_LENGTHS: &[(&[u8; 2], usize)] = &[
    (b"AD", 24),
    (b"AE", 23),
    (b"AL", 28),
    (b"AT", 20),
    (b"AZ", 28),
    (b"BA", 20),
    (b"BE", 16),
    (b"BG", 22),
    (b"BH", 22),
    (b"BR", 29),
    (b"BY", 28),
    (b"CH", 21),
    (b"CR", 22),
    (b"CY", 28),
    (b"CZ", 24),
    (b"DE", 22),
    (b"DJ", 27),
    (b"DK", 18),
    (b"DO", 28),
    (b"EE", 20),
    (b"EG", 29),
    (b"ES", 24),
    (b"FI", 18),
    (b"FK", 18),
    (b"FO", 18),
    (b"FR", 27),
    (b"GB", 22),
    (b"GE", 22),
    (b"GI", 23),
    (b"GL", 18),
    (b"GR", 27),
    (b"GT", 28),
    (b"HN", 28),
    (b"HR", 21),
    (b"HU", 28),
    (b"IE", 22),
    (b"IL", 23),
    (b"IQ", 23),
    (b"IS", 26),
    (b"IT", 27),
    (b"JO", 30),
    (b"KW", 30),
    (b"KZ", 20),
    (b"LB", 28),
    (b"LC", 32),
    (b"LI", 21),
    (b"LT", 20),
    (b"LU", 20),
    (b"LV", 21),
    (b"LY", 25),
    (b"MC", 27),
    (b"MD", 24),
    (b"ME", 22),
    (b"MK", 19),
    (b"MN", 20),
    (b"MR", 27),
    (b"MT", 31),
    (b"MU", 30),
    (b"NL", 18),
    (b"NO", 15),
    (b"OM", 23),
    (b"PK", 24),
    (b"PL", 28),
    (b"PS", 29),
    (b"PT", 25),
    (b"QA", 29),
    (b"RO", 24),
    (b"RS", 22),
    (b"RU", 33),
    (b"SA", 24),
    (b"SC", 31),
    (b"SD", 18),
    (b"SE", 24),
    (b"SI", 19),
    (b"SK", 24),
    (b"SM", 27),
    (b"SO", 23),
    (b"ST", 25),
    (b"SV", 28),
    (b"TL", 23),
    (b"TN", 24),
    (b"TR", 26),
    (b"UA", 29),
    (b"VA", 22),
    (b"VG", 24),
    (b"XK", 20),
    (b"YE", 30),
];

/// The registered IBAN length of a country code, if the country uses IBANs.
pub(crate) fn iban_length(country: &[u8]) -> Option<usize> {
    IBAN_LENGTHS.binary_search_by(|(cc, _)| cc.as_slice().cmp(country)).ok().map(|i| IBAN_LENGTHS[i].1)
}

/// ISO 13616 / ISO 7064 mod 97-10 over the compact form (upper-case letters and digits, no
/// spaces): first four characters moved to the end, letters read as 10..35, remainder 1.
pub(crate) fn iban_valid(compact: &[u8]) -> bool {
    if compact.len() < 5 || iban_length(&compact[..2]) != Some(compact.len()) {
        return false;
    }
    // Check digits 00, 01 and 99 are never issued.
    let check = &compact[2..4];
    if !check.iter().all(u8::is_ascii_digit) || check == b"00" || check == b"01" || check == b"99" {
        return false;
    }
    let mut r = 0u32;
    for &c in compact[4..].iter().chain(&compact[..4]) {
        r = match c {
            b'0'..=b'9' => (r * 10 + u32::from(c - b'0')) % 97,
            b'A'..=b'Z' => (r * 100 + u32::from(c - b'A') + 10) % 97,
            _ => return false,
        };
    }
    r == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luhn_accepts_known_test_numbers_and_rejects_near_misses() {
        for ok in ["4111111111111111", "5500000000000004", "378282246310005", "6011111111111117", "79927398713"] {
            assert!(luhn_valid(ok.as_bytes()), "{ok}");
        }
        for bad in ["4111111111111112", "1234567812345678", "79927398710", "", "4111a11111111111"] {
            assert!(!luhn_valid(bad.as_bytes()), "{bad}");
        }
    }

    #[test]
    fn iban_checksum_and_length() {
        for ok in [
            "GB82WEST12345698765432",
            "DE89370400440532013000",
            "FR1420041010050500013M02606",
            "NL91ABNA0417164300",
            "BE68539007547034",
            "CH9300762011623852957",
            "NO9386011117947",
        ] {
            assert!(iban_valid(ok.as_bytes()), "{ok}");
        }
        // Wrong check digit, wrong length for the country, unknown country, lower case.
        for bad in [
            "GB83WEST12345698765432",
            "DE89370400440532013001",
            "DE8937040044053201300",
            "ZZ89370400440532013000",
            "gb82WEST12345698765432",
        ] {
            assert!(!iban_valid(bad.as_bytes()), "{bad}");
        }
        assert_eq!(iban_length(b"DE"), Some(22));
        assert_eq!(iban_length(b"US"), None);
        // The table must stay sorted for the binary search.
        assert!(IBAN_LENGTHS.windows(2).all(|w| w[0].0 < w[1].0));
    }
}
