//! Training data for the trainer: CIFAR-10 in its binary format
//! (`data_batch_*.bin`, `test_batch.bin`: records of one label byte and
//! 3x32x32 bytes), normalised with the usual per-channel mean and standard
//! deviation and shuffled per epoch with a seeded permutation; or, without
//! `--data`, SYNTHETIC samples (random, labelled as such) of the plan's shape.
use std::path::{Path, PathBuf};

use tch::{Device, Kind, Tensor};

pub const CIFAR_INPUT: [i64; 3] = [3, 32, 32];
pub const CIFAR_CLASSES: i64 = 10;
const RECORD: usize = 1 + 3 * 32 * 32;
const MEAN: [f64; 3] = [0.4914, 0.4822, 0.4465];
const STD: [f64; 3] = [0.2470, 0.2435, 0.2616];

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("no CIFAR-10 training files (data_batch_*.bin) in {0}")]
    NoFiles(PathBuf),
    #[error("{path}: {len} bytes is not a whole number of CIFAR-10 records ({RECORD} bytes each)")]
    Truncated { path: PathBuf, len: usize },
    #[error("{path}: record {record} has label {label}, CIFAR-10 labels are 0 to 9")]
    BadLabel { path: PathBuf, record: usize, label: u8 },
    #[error("reading {0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("building a batch: {0}")]
    Torch(#[from] tch::TchError),
}

/// splitmix64: a tiny, well-mixed, seedable generator for the shuffle.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The order of `n` samples in `epoch`: a Fisher-Yates shuffle seeded by
/// (seed, epoch), so a resumed run sees the same order.
pub fn epoch_order(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut state = seed ^ epoch.wrapping_mul(0xD1B5_4A32_D192_ED03);
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (splitmix(&mut state) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

/// Where samples come from.
#[derive(Debug)]
pub enum Dataset {
    /// CIFAR-10 images (uint8, N x 3 x 32 x 32) and labels.
    Cifar { images: Vec<u8>, labels: Vec<u8> },
    /// SYNTHETIC samples: sample `i` is random data seeded by `i`.
    Synthetic { input: Vec<i64>, classes: i64, size: usize },
}

impl Dataset {
    /// Reads every `data_batch_*.bin` in `dir`, in name order.
    pub fn cifar(dir: &Path) -> Result<Dataset, DataError> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| DataError::Io(dir.to_path_buf(), e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("data_batch_") && n.ends_with(".bin"))
            })
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(DataError::NoFiles(dir.to_path_buf()));
        }
        let (mut images, mut labels) = (Vec::new(), Vec::new());
        for path in files {
            let bytes = std::fs::read(&path).map_err(|e| DataError::Io(path.clone(), e))?;
            if bytes.is_empty() || bytes.len() % RECORD != 0 {
                return Err(DataError::Truncated { path, len: bytes.len() });
            }
            for (record, chunk) in bytes.chunks_exact(RECORD).enumerate() {
                if chunk[0] >= CIFAR_CLASSES as u8 {
                    return Err(DataError::BadLabel { path, record, label: chunk[0] });
                }
                labels.push(chunk[0]);
                images.extend_from_slice(&chunk[1..]);
            }
        }
        Ok(Dataset::Cifar { images, labels })
    }

    pub fn len(&self) -> usize {
        match self {
            Dataset::Cifar { labels, .. } => labels.len(),
            Dataset::Synthetic { size, .. } => *size,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn input(&self) -> Vec<i64> {
        match self {
            Dataset::Cifar { .. } => CIFAR_INPUT.to_vec(),
            Dataset::Synthetic { input, .. } => input.clone(),
        }
    }

    pub fn classes(&self) -> i64 {
        match self {
            Dataset::Cifar { .. } => CIFAR_CLASSES,
            Dataset::Synthetic { classes, .. } => *classes,
        }
    }

    pub fn is_synthetic(&self) -> bool {
        matches!(self, Dataset::Synthetic { .. })
    }

    /// The samples at `indices`, as an input batch and labels on `device`.
    pub fn batch(&self, indices: &[usize], device: Device) -> Result<(Tensor, Tensor), DataError> {
        let n = indices.len() as i64;
        match self {
            Dataset::Cifar { images, labels } => {
                let per = RECORD - 1;
                let mut raw = Vec::with_capacity(indices.len() * per);
                for &i in indices {
                    raw.extend_from_slice(&images[i * per..(i + 1) * per]);
                }
                let ys: Vec<i64> = indices.iter().map(|&i| i64::from(labels[i])).collect();
                let xs =
                    Tensor::f_from_slice(&raw)?.f_view([n, 3, 32, 32])?.f_to_kind(Kind::Float)?.f_div_scalar(255.0)?;
                let mean = Tensor::f_from_slice(&MEAN)?.f_to_kind(Kind::Float)?.f_view([1, 3, 1, 1])?;
                let std = Tensor::f_from_slice(&STD)?.f_to_kind(Kind::Float)?.f_view([1, 3, 1, 1])?;
                let xs = xs.f_sub(&mean)?.f_div(&std)?.f_to_device(device)?;
                Ok((xs, Tensor::f_from_slice(&ys)?.f_to_device(device)?))
            }
            Dataset::Synthetic { input, classes, .. } => {
                let mut shape = vec![1];
                shape.extend_from_slice(input);
                let mut samples = Vec::with_capacity(indices.len());
                let mut ys = Vec::with_capacity(indices.len());
                for &i in indices {
                    tch::manual_seed(0x5EED_0000 + i as i64);
                    samples.push(Tensor::f_randn(shape.as_slice(), (Kind::Float, Device::Cpu))?);
                    let mut s = i as u64;
                    ys.push((splitmix(&mut s) % *classes as u64) as i64);
                }
                let xs = Tensor::f_cat(&samples, 0)?.f_to_device(device)?;
                Ok((xs, Tensor::f_from_slice(&ys)?.f_to_device(device)?))
            }
        }
    }
}

/// Writes `records` (label, 3072 pixel bytes) in CIFAR-10's binary format;
/// used by tests to make tiny data sets.
pub fn write_cifar(path: &Path, records: &[(u8, Vec<u8>)]) -> std::io::Result<()> {
    let mut bytes = Vec::with_capacity(records.len() * RECORD);
    for (label, pixels) in records {
        bytes.push(*label);
        bytes.extend_from_slice(pixels);
    }
    std::fs::write(path, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffles_are_seeded_permutations() {
        let a = epoch_order(100, 7, 0);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        assert_eq!(a, epoch_order(100, 7, 0));
        assert_ne!(a, epoch_order(100, 7, 1));
        assert_ne!(a, epoch_order(100, 8, 0));
    }

    #[test]
    fn cifar_files_load_and_normalise() {
        let dir = tempfile::tempdir().unwrap();
        let records: Vec<(u8, Vec<u8>)> = (0..5u8).map(|l| (l, vec![l * 50; 3072])).collect();
        write_cifar(&dir.path().join("data_batch_1.bin"), &records).unwrap();
        write_cifar(&dir.path().join("test_batch.bin"), &records[..1]).unwrap();
        let data = Dataset::cifar(dir.path()).unwrap();
        assert_eq!(data.len(), 5);
        let (xs, ys) = data.batch(&[4, 0], Device::Cpu).unwrap();
        assert_eq!(xs.size(), vec![2, 3, 32, 32]);
        assert_eq!(Vec::<i64>::try_from(&ys).unwrap(), vec![4, 0]);
        // Pixel 200 in the red channel: (200/255 - 0.4914) / 0.2470.
        let v = xs.double_value(&[0, 0, 0, 0]);
        assert!((v - (200.0 / 255.0 - 0.4914) / 0.2470).abs() < 1e-5, "{v}");
    }

    #[test]
    fn broken_cifar_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(Dataset::cifar(dir.path()), Err(DataError::NoFiles(_))));
        std::fs::write(dir.path().join("data_batch_1.bin"), vec![0u8; 100]).unwrap();
        assert!(Dataset::cifar(dir.path()).unwrap_err().to_string().contains("not a whole number of CIFAR-10 records"));
        write_cifar(&dir.path().join("data_batch_1.bin"), &[(11, vec![0; 3072])]).unwrap();
        assert!(Dataset::cifar(dir.path()).unwrap_err().to_string().contains("label 11"));
    }

    #[test]
    fn synthetic_samples_do_not_depend_on_how_they_are_batched() {
        let data = Dataset::Synthetic { input: vec![3, 8, 8], classes: 10, size: 16 };
        let (all, ys_all) = data.batch(&[3, 4, 5, 6], Device::Cpu).unwrap();
        let (half, ys_half) = data.batch(&[5, 6], Device::Cpu).unwrap();
        assert!(all.narrow(0, 2, 2).equal(&half));
        assert!(ys_all.narrow(0, 2, 2).equal(&ys_half));
    }
}
