//! ResNets as torchvision builds them, op for op: ReLU in place, the residual
//! added in place, the same layer order (tch's zoo applies ReLU out of place,
//! which keeps an extra activation per ReLU alive for backward: 9 to 14% more
//! memory per step than PyTorch for resnet18, design.md fact 8).
use tch::{nn, nn::ModuleT, TchError, Tensor};

use super::{Network, Outputs};

fn conv(p: nn::Path, c_in: i64, c_out: i64, k: i64, stride: i64, padding: i64) -> nn::Conv2D {
    nn::conv2d(p, c_in, c_out, k, nn::ConvConfig { stride, padding, bias: false, ..Default::default() })
}

fn bn(p: nn::Path, c: i64) -> nn::BatchNorm {
    nn::batch_norm2d(p, c, Default::default())
}

/// `downsample` when the shape changes: 1x1 convolution and batch norm.
fn downsample(p: &nn::Path, c_in: i64, c_out: i64, stride: i64) -> Option<nn::SequentialT> {
    (stride != 1 || c_in != c_out)
        .then(|| nn::seq_t().add(conv(p / "0", c_in, c_out, 1, stride, 0)).add(bn(p / "1", c_out)))
}

/// torchvision's `BasicBlock`.
fn basic_block(p: nn::Path, c_in: i64, c_out: i64, stride: i64) -> impl ModuleT {
    let conv1 = conv(&p / "conv1", c_in, c_out, 3, stride, 1);
    let bn1 = bn(&p / "bn1", c_out);
    let conv2 = conv(&p / "conv2", c_out, c_out, 3, 1, 1);
    let bn2 = bn(&p / "bn2", c_out);
    let down = downsample(&(&p / "downsample"), c_in, c_out, stride);
    nn::func_t(move |xs, train| {
        let mut out = xs.apply(&conv1).apply_t(&bn1, train);
        let _ = out.relu_();
        let out = out.apply(&conv2).apply_t(&bn2, train);
        add_identity_relu(out, xs, &down, train)
    })
}

/// How torchvision's blocks end: `out += identity` then ReLU, both in place.
fn add_identity_relu(mut out: Tensor, xs: &Tensor, down: &Option<nn::SequentialT>, train: bool) -> Tensor {
    let identity = match down {
        Some(d) => xs.apply_t(d, train),
        None => xs.shallow_clone(),
    };
    let _ = out.g_add_(&identity);
    let _ = out.relu_();
    out
}

/// torchvision's `Bottleneck` (the stride on the 3x3 convolution, as in v1.5).
fn bottleneck(p: nn::Path, c_in: i64, width: i64, stride: i64) -> impl ModuleT {
    let c_out = width * 4;
    let conv1 = conv(&p / "conv1", c_in, width, 1, 1, 0);
    let bn1 = bn(&p / "bn1", width);
    let conv2 = conv(&p / "conv2", width, width, 3, stride, 1);
    let bn2 = bn(&p / "bn2", width);
    let conv3 = conv(&p / "conv3", width, c_out, 1, 1, 0);
    let bn3 = bn(&p / "bn3", c_out);
    let down = downsample(&(&p / "downsample"), c_in, c_out, stride);
    nn::func_t(move |xs, train| {
        let mut out = xs.apply(&conv1).apply_t(&bn1, train);
        let _ = out.relu_();
        let mut out = out.apply(&conv2).apply_t(&bn2, train);
        let _ = out.relu_();
        let out = out.apply(&conv3).apply_t(&bn3, train);
        add_identity_relu(out, xs, &down, train)
    })
}

#[derive(Clone, Copy)]
enum Block {
    Basic,
    Bottleneck,
}

#[derive(Debug)]
pub struct ResNet {
    stem: nn::SequentialT,
    layers: nn::SequentialT,
    fc: nn::Linear,
}

fn resnet(p: &nn::Path, block: Block, counts: [i64; 4], classes: i64) -> ResNet {
    let conv1 = conv(p / "conv1", 3, 64, 7, 2, 3);
    let bn1 = bn(p / "bn1", 64);
    let stem = nn::seq_t().add(conv1).add(bn1).add_fn(|xs| {
        let mut xs = xs.shallow_clone();
        let _ = xs.relu_();
        xs.max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], false)
    });
    let expansion = match block {
        Block::Basic => 1,
        Block::Bottleneck => 4,
    };
    let mut layers = nn::seq_t();
    let mut c_in = 64;
    for (i, (&n, width)) in counts.iter().zip([64, 128, 256, 512]).enumerate() {
        let lp = p / format!("layer{}", i + 1);
        for j in 0..n {
            let stride = if i > 0 && j == 0 { 2 } else { 1 };
            layers = match block {
                Block::Basic => layers.add(basic_block(&lp / j, c_in, width, stride)),
                Block::Bottleneck => layers.add(bottleneck(&lp / j, c_in, width, stride)),
            };
            c_in = width * expansion;
        }
    }
    let fc = nn::linear(p / "fc", 512 * expansion, classes, Default::default());
    ResNet { stem, layers, fc }
}

impl Network for ResNet {
    fn forward(&self, xs: &Tensor, train: bool) -> Result<Outputs, TchError> {
        let features = xs.apply_t(&self.stem, train).apply_t(&self.layers, train);
        let logits = features.adaptive_avg_pool2d([1, 1]).flatten(1, -1).apply(&self.fc);
        Ok(Outputs { logits, aux: None })
    }
}

pub fn resnet18(p: &nn::Path, classes: i64) -> ResNet {
    resnet(p, Block::Basic, [2, 2, 2, 2], classes)
}

pub fn resnet34(p: &nn::Path, classes: i64) -> ResNet {
    resnet(p, Block::Basic, [3, 4, 6, 3], classes)
}

pub fn resnet50(p: &nn::Path, classes: i64) -> ResNet {
    resnet(p, Block::Bottleneck, [3, 4, 6, 3], classes)
}

pub fn resnet101(p: &nn::Path, classes: i64) -> ResNet {
    resnet(p, Block::Bottleneck, [3, 4, 23, 3], classes)
}

pub fn resnet152(p: &nn::Path, classes: i64) -> ResNet {
    resnet(p, Block::Bottleneck, [3, 8, 36, 3], classes)
}
