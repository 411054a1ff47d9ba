//! Pure: memory against batch and sequence length together, for token
//! models swept at several lengths (`sweep --seq-lens`).
//!
//! `peak = fixed + per_token x (batch x length) + per_token_len x (batch x length²)`:
//! activations grow with the tokens in the batch; attention that
//! materialises its length x length scores adds the quadratic term (memory-
//! efficient attention kernels, such as PyTorch's flash attention, do not).
//! When the data give the quadratic term no weight (it comes out negative)
//! it is dropped, so the fit says what the data show.
use serde::{Deserialize, Serialize};

/// A measured peak at one (batch, length).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub batch: u64,
    pub length: u64,
    pub peak_bytes: f64,
}

/// The fitted surface.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SeqFit {
    pub fixed_bytes: f64,
    pub per_token_bytes: f64,
    /// Bytes per (sample x length²); 0 when the data show no quadratic term.
    pub per_token_length_bytes: f64,
    pub r2: f64,
    pub points: usize,
}

impl SeqFit {
    pub fn predict(&self, batch: u64, length: u64) -> f64 {
        let (b, t) = (batch as f64, length as f64);
        self.fixed_bytes + self.per_token_bytes * b * t + self.per_token_length_bytes * b * t * t
    }

    /// The largest batch at `length` whose predicted peak is within `budget_bytes`.
    pub fn max_batch_within(&self, budget_bytes: u64, length: u64) -> u64 {
        let t = length as f64;
        let per_sample = self.per_token_bytes * t + self.per_token_length_bytes * t * t;
        let room = budget_bytes as f64 - self.fixed_bytes;
        if per_sample <= 0.0 || room <= 0.0 {
            return 0;
        }
        (room / per_sample).floor() as u64
    }
}

/// Least squares over the given feature columns; None when singular.
fn least_squares(rows: &[Vec<f64>], y: &[f64]) -> Option<Vec<f64>> {
    let k = rows.first()?.len();
    // Scale columns to 1 so the normal equations stay well conditioned.
    let scale: Vec<f64> = (0..k)
        .map(|j| rows.iter().map(|r| r[j].abs()).fold(0.0, f64::max))
        .map(|m| if m > 0.0 { m } else { 1.0 })
        .collect();
    let mut a = vec![vec![0.0; k + 1]; k];
    for (r, &yi) in rows.iter().zip(y) {
        for i in 0..k {
            for j in 0..k {
                a[i][j] += r[i] / scale[i] * r[j] / scale[j];
            }
            a[i][k] += r[i] / scale[i] * yi;
        }
    }
    // Gaussian elimination with partial pivoting.
    for col in 0..k {
        let pivot = (col..k).max_by(|&x, &z| a[x][col].abs().total_cmp(&a[z][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        let pivot_row = a[col].clone();
        for (row, values) in a.iter_mut().enumerate() {
            if row != col {
                let f = values[col] / pivot_row[col];
                for (v, p) in values.iter_mut().zip(&pivot_row).skip(col) {
                    *v -= f * p;
                }
            }
        }
    }
    Some((0..k).map(|i| a[i][k] / a[i][i] / scale[i]).collect())
}

fn r_squared(points: &[Point], fit: &SeqFit) -> f64 {
    let mean = points.iter().map(|p| p.peak_bytes).sum::<f64>() / points.len() as f64;
    let total: f64 = points.iter().map(|p| (p.peak_bytes - mean).powi(2)).sum();
    let residual: f64 = points.iter().map(|p| (p.peak_bytes - fit.predict(p.batch, p.length)).powi(2)).sum();
    if total > 0.0 {
        1.0 - residual / total
    } else {
        1.0
    }
}

/// Fits the surface; None without at least two lengths and four points.
pub fn fit(points: &[Point]) -> Option<SeqFit> {
    let mut lengths: Vec<u64> = points.iter().map(|p| p.length).collect();
    lengths.sort_unstable();
    lengths.dedup();
    if lengths.len() < 2 || points.len() < 4 {
        return None;
    }
    let y: Vec<f64> = points.iter().map(|p| p.peak_bytes).collect();
    let tokens = |p: &Point| (p.batch * p.length) as f64;
    let quadratic: Vec<Vec<f64>> = points.iter().map(|p| vec![1.0, tokens(p), tokens(p) * p.length as f64]).collect();
    let with_quadratic = least_squares(&quadratic, &y).filter(|c| c[2] >= 0.0 && c[1] >= 0.0);
    let coefficients = match with_quadratic {
        Some(c) => c,
        None => {
            let linear: Vec<Vec<f64>> = points.iter().map(|p| vec![1.0, tokens(p)]).collect();
            let mut c = least_squares(&linear, &y)?;
            c.push(0.0);
            c
        }
    };
    let mut fit = SeqFit {
        fixed_bytes: coefficients[0],
        per_token_bytes: coefficients[1],
        per_token_length_bytes: coefficients[2],
        r2: 0.0,
        points: points.len(),
    };
    fit.r2 = r_squared(points, &fit);
    Some(fit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(f: impl Fn(u64, u64) -> f64) -> Vec<Point> {
        let mut out = Vec::new();
        for length in [128, 256, 512] {
            for batch in [2, 4, 8] {
                out.push(Point { batch, length, peak_bytes: f(batch, length) });
            }
        }
        out
    }

    #[test]
    fn recovers_a_quadratic_attention_surface() {
        let truth = |b: u64, t: u64| 5e8 + 3e4 * (b * t) as f64 + 40.0 * (b * t * t) as f64;
        let fit = fit(&grid(truth)).unwrap();
        assert!((fit.fixed_bytes - 5e8).abs() < 1.0, "{fit:?}");
        assert!((fit.per_token_bytes - 3e4).abs() < 1e-3, "{fit:?}");
        assert!((fit.per_token_length_bytes - 40.0).abs() < 1e-6, "{fit:?}");
        assert!(fit.r2 > 0.999_999);
        // Held out: a length that was not measured.
        let (b, t) = (3, 384);
        assert!((fit.predict(b, t) / truth(b, t) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn linear_data_gets_no_quadratic_term() {
        // Slightly concave data would give a negative quadratic term: dropped.
        let fit = fit(&grid(|b, t| 1e8 + 2e4 * (b * t) as f64 - 0.5 * (b * t * t) as f64)).unwrap();
        assert_eq!(fit.per_token_length_bytes, 0.0);
        assert!(fit.per_token_bytes > 0.0);
    }

    #[test]
    fn max_batch_per_length_respects_the_budget() {
        let f = SeqFit { fixed_bytes: 1e9, per_token_bytes: 1e4, per_token_length_bytes: 10.0, r2: 1.0, points: 9 };
        let budget = 9_000_000_000;
        for t in [128, 1024, 4096] {
            let b = f.max_batch_within(budget, t);
            assert!(f.predict(b, t) <= budget as f64);
            assert!(f.predict(b + 1, t) > budget as f64);
        }
        assert_eq!(f.max_batch_within(500_000_000, 128), 0);
    }

    #[test]
    fn one_length_is_not_enough() {
        let points: Vec<Point> =
            [1, 2, 4, 8].iter().map(|&b| Point { batch: b, length: 64, peak_bytes: b as f64 }).collect();
        assert!(fit(&points).is_none());
    }
}
