//! VGGs as torchvision builds them, op for op: ReLU in place after every
//! convolution (and batch norm) and in the classifier, adaptive average
//! pooling to 7x7 (so any input of at least 32x32 works, as in torchvision;
//! tch's zoo pools to a fixed size and only runs at 224), and the classifier's
//! two dropouts. Variable names follow torchvision's state_dict keys
//! (`features.0.weight`, `classifier.6.bias`).
use tch::nn;

use super::layers::{max_pool, relu_inplace};

/// One entry of torchvision's `cfgs`: a 3x3 convolution to this many
/// channels, or a 2x2 max pool.
#[derive(Clone, Copy)]
enum Layer {
    Conv(i64),
    Pool,
}

use Layer::{Conv as C, Pool as M};

const A: &[Layer] = &[C(64), M, C(128), M, C(256), C(256), M, C(512), C(512), M, C(512), C(512), M];
const D: &[Layer] = &[
    C(64),
    C(64),
    M,
    C(128),
    C(128),
    M,
    C(256),
    C(256),
    C(256),
    M,
    C(512),
    C(512),
    C(512),
    M,
    C(512),
    C(512),
    C(512),
    M,
];

/// torchvision's `make_layers`: the indices count every module (convolution,
/// batch norm, ReLU, pool), as the state_dict keys do.
fn features(p: &nn::Path, cfg: &[Layer], batch_norm: bool) -> nn::SequentialT {
    let mut seq = nn::seq_t();
    let mut c_in = 3;
    let mut i = 0;
    for layer in cfg {
        match *layer {
            Layer::Pool => {
                seq = seq.add_fn(|xs| max_pool(xs, 2, 2));
                i += 1;
            }
            Layer::Conv(c_out) => {
                let cfg = nn::ConvConfig { padding: 1, ..Default::default() };
                seq = seq.add(nn::conv2d(p / i, c_in, c_out, 3, cfg));
                i += 1;
                if batch_norm {
                    seq = seq.add(nn::batch_norm2d(p / i, c_out, Default::default()));
                    i += 1;
                }
                seq = seq.add_fn(relu_inplace);
                i += 1;
                c_in = c_out;
            }
        }
    }
    seq
}

fn vgg(p: &nn::Path, cfg: &[Layer], batch_norm: bool, classes: i64) -> nn::SequentialT {
    let c = p / "classifier";
    nn::seq_t()
        .add(features(&(p / "features"), cfg, batch_norm))
        .add_fn(|xs| xs.adaptive_avg_pool2d([7, 7]).flatten(1, -1))
        .add(nn::linear(&c / 0, 512 * 7 * 7, 4096, Default::default()))
        .add_fn(relu_inplace)
        .add_fn_t(|xs, train| xs.dropout(0.5, train))
        .add(nn::linear(&c / 3, 4096, 4096, Default::default()))
        .add_fn(relu_inplace)
        .add_fn_t(|xs, train| xs.dropout(0.5, train))
        .add(nn::linear(&c / 6, 4096, classes, Default::default()))
}

pub fn vgg11(p: &nn::Path, classes: i64) -> nn::SequentialT {
    vgg(p, A, false, classes)
}

pub fn vgg16(p: &nn::Path, classes: i64) -> nn::SequentialT {
    vgg(p, D, false, classes)
}

pub fn vgg16_bn(p: &nn::Path, classes: i64) -> nn::SequentialT {
    vgg(p, D, true, classes)
}
