//! Parsing and printing the quantities a user types and reads: byte sizes
//! (`6GiB`), input shapes (`3x224x224`) and batch lists (`1,2,4`).
use crate::error::UsageError;

const UNITS: [(&str, u64); 9] = [
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
    ("b", 1),
];

/// Parses `6GiB`, `512MiB`, `8GB`, `1.5GiB` or a plain byte count.
pub fn parse_bytes(text: &str) -> Result<u64, UsageError> {
    let bad = || {
        UsageError::new(format!(
            "invalid size '{text}': expected a number with an optional unit, e.g. 6GiB, 512MiB, 8GB or 1073741824"
        ))
    };
    let lower = text.trim().to_ascii_lowercase();
    let (number, scale) = UNITS
        .iter()
        .find_map(|(unit, scale)| lower.strip_suffix(unit).map(|n| (n.trim(), *scale)))
        .unwrap_or((lower.as_str(), 1));
    let value: f64 = number.parse().map_err(|_| bad())?;
    if !value.is_finite() || value <= 0.0 {
        return Err(bad());
    }
    let bytes = value * scale as f64;
    if bytes >= u64::MAX as f64 || bytes < 1.0 {
        return Err(bad());
    }
    Ok(bytes.round() as u64)
}

/// Parses an input shape: `3x224x224` (channels x height x width) for image
/// models, or one number (the sequence length) for token models.
pub fn parse_input(text: &str) -> Result<Vec<i64>, UsageError> {
    let bad = |why: &str| {
        UsageError::new(format!("invalid --input '{text}': {why} (expected dimensions joined by 'x', e.g. 3x224x224)"))
    };
    let dims = text
        .trim()
        .split(['x', 'X'])
        .map(|d| d.trim().parse::<i64>().map_err(|_| bad("not a whole number")))
        .collect::<Result<Vec<_>, _>>()?;
    if dims.iter().any(|&d| d <= 0) {
        return Err(bad("every dimension must be at least 1"));
    }
    if dims.len() != 3 && dims.len() != 1 {
        return Err(bad("image models take three dimensions, token models one (the sequence length)"));
    }
    Ok(dims)
}

/// Formats an input shape back as `3x224x224`.
pub fn format_input(dims: &[i64]) -> String {
    dims.iter().map(i64::to_string).collect::<Vec<_>>().join("x")
}

/// Parses a positive batch size.
pub fn parse_batch(text: &str) -> Result<u64, UsageError> {
    match text.trim().parse::<i64>() {
        Ok(b) if b >= 1 => Ok(b as u64),
        Ok(b) => Err(UsageError::new(format!("invalid batch size {b}: a batch must be at least 1"))),
        Err(_) => Err(UsageError::new(format!("invalid batch size '{text}': expected a whole number such as 32"))),
    }
}

/// Parses `1,2,4,8` into distinct ascending batch sizes.
pub fn parse_batches(text: &str) -> Result<Vec<u64>, UsageError> {
    let mut batches = text
        .split(',')
        .map(parse_batch)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| UsageError::new(format!("invalid --batches '{text}': {e}")))?;
    batches.sort_unstable();
    batches.dedup();
    Ok(batches)
}

/// Bytes as a human reads them: `1.50 GiB`, `178.4 MiB`.
pub fn human_bytes(bytes: f64) -> String {
    let sign = if bytes < 0.0 { "-" } else { "" };
    let b = bytes.abs();
    let (value, unit) = if b >= (1u64 << 30) as f64 {
        (b / (1u64 << 30) as f64, "GiB")
    } else if b >= (1u64 << 20) as f64 {
        (b / (1u64 << 20) as f64, "MiB")
    } else if b >= 1024.0 {
        (b / 1024.0, "KiB")
    } else {
        return format!("{sign}{b:.0} B");
    };
    format!("{sign}{value:.2} {unit}")
}

/// Words as one line a shell reads back into the same words: plain words as
/// they are (`{batch}` too), others in single quotes.
pub fn shell_line(words: &[String]) -> String {
    let quote = |w: &String| {
        if !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=,%+@{}".contains(c)) {
            w.clone()
        } else {
            format!("'{}'", w.replace('\'', r"'\''"))
        }
    };
    words.iter().map(quote).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_line_is_quoted_as_a_shell_reads_it() {
        let args =
            ["vramprobe", "sweep", "--model", "my model.pt", "--margin", "10%", "it's", "{batch}"].map(String::from);
        assert_eq!(shell_line(&args), "vramprobe sweep --model 'my model.pt' --margin 10% 'it'\\''s' {batch}");
    }

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_bytes("6GiB").unwrap(), 6 << 30);
        assert_eq!(parse_bytes("512 MiB").unwrap(), 512 << 20);
        assert_eq!(parse_bytes("8GB").unwrap(), 8_000_000_000);
        assert_eq!(parse_bytes("1.5gib").unwrap(), 3 << 29);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
    }

    #[test]
    fn malformed_sizes_are_rejected() {
        for bad in ["", "GiB", "-1GiB", "0", "six GiB", "1e400", "nan", "6 XB"] {
            assert!(parse_bytes(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn inputs_parse_and_round_trip() {
        assert_eq!(parse_input("3x224x224").unwrap(), vec![3, 224, 224]);
        assert_eq!(format_input(&[3, 32, 32]), "3x32x32");
        for bad in ["3x224", "3x0x224", "ax224x224", "", "3x224x224x1", "3x-1x2"] {
            assert!(parse_input(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn batches_must_be_positive_whole_numbers() {
        assert_eq!(parse_batches("8,1,2,2").unwrap(), vec![1, 2, 8]);
        for bad in ["0", "-4", "1,,2", "two", "1.5"] {
            assert!(parse_batches(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn human_bytes_picks_a_readable_unit() {
        assert_eq!(human_bytes(512.0), "512 B");
        assert_eq!(human_bytes((3u64 << 29) as f64), "1.50 GiB");
        assert_eq!(human_bytes(-2048.0), "-2.00 KiB");
    }
}
