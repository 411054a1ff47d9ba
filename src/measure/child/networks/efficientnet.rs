//! EfficientNet-B0 as torchvision builds it, op for op: SiLU in place after
//! each batch norm, squeeze-and-excitation with an in-place SiLU and an
//! out-of-place sigmoid, stochastic depth ('row' mode: a per-sample noise
//! tensor multiplies the branch, out of place) before the in-place residual
//! add, and the classifier's in-place dropout. tch's zoo applies its
//! activations out of place and has no stochastic depth, which costs about a
//! quarter more memory per step than PyTorch. Variable names follow
//! torchvision's state_dict keys (`features.1.0.block.1.fc1.weight`).
use tch::{nn, nn::ModuleT, Tensor};

use super::layers::silu_inplace;

/// torchvision's `Conv2dNormActivation`: convolution without bias, batch
/// norm, then SiLU in place when `silu`.
fn conv_bn(p: &nn::Path, c_in: i64, c_out: i64, k: i64, stride: i64, groups: i64, silu: bool) -> nn::SequentialT {
    let cfg = nn::ConvConfig { stride, padding: (k - 1) / 2, groups, bias: false, ..Default::default() };
    let seq =
        nn::seq_t().add(nn::conv2d(p / 0, c_in, c_out, k, cfg)).add(nn::batch_norm2d(p / 1, c_out, Default::default()));
    if silu {
        seq.add_fn(silu_inplace)
    } else {
        seq
    }
}

/// torchvision's `SqueezeExcitation` with `activation=SiLU(inplace=True)`.
fn squeeze_excitation(p: &nn::Path, c: i64, squeeze: i64) -> impl ModuleT {
    let fc1 = nn::conv2d(p / "fc1", c, squeeze, 1, Default::default());
    let fc2 = nn::conv2d(p / "fc2", squeeze, c, 1, Default::default());
    nn::func_t(move |xs, _| {
        let scale = silu_inplace(&xs.adaptive_avg_pool2d([1, 1]).apply(&fc1));
        scale.apply(&fc2).sigmoid() * xs
    })
}

/// torchvision's `stochastic_depth(input, p, "row", training)`.
fn stochastic_depth(xs: Tensor, p: f64, train: bool) -> Tensor {
    if !train || p == 0.0 {
        return xs;
    }
    let survival = 1.0 - p;
    let mut size = vec![1i64; xs.dim()];
    size[0] = xs.size()[0];
    let mut noise = Tensor::empty(size, (xs.kind(), xs.device()));
    let _ = noise.bernoulli_float_(survival);
    if survival > 0.0 {
        let _ = noise.g_div_scalar_(survival);
    }
    xs * noise
}

/// torchvision's `MBConv`: expansion (when the ratio is not 1), depthwise
/// convolution, squeeze-and-excitation, projection; on a residual block,
/// stochastic depth then `result += input`.
fn mbconv(p: nn::Path, expand: i64, k: i64, stride: i64, c_in: i64, c_out: i64, sd_prob: f64) -> impl ModuleT {
    let b = &p / "block";
    let expanded = c_in * expand;
    let mut block = nn::seq_t();
    let mut i = 0;
    if expanded != c_in {
        block = block.add(conv_bn(&(&b / i), c_in, expanded, 1, 1, 1, true));
        i += 1;
    }
    block = block.add(conv_bn(&(&b / i), expanded, expanded, k, stride, expanded, true));
    block = block.add(squeeze_excitation(&(&b / (i + 1)), expanded, (c_in / 4).max(1)));
    block = block.add(conv_bn(&(&b / (i + 2)), expanded, c_out, 1, 1, 1, false));
    let residual = stride == 1 && c_in == c_out;
    nn::func_t(move |xs, train| {
        let result = xs.apply_t(&block, train);
        if residual {
            let mut result = stochastic_depth(result, sd_prob, train);
            let _ = result.g_add_(xs);
            result
        } else {
            result
        }
    })
}

pub fn b0(p: &nn::Path, classes: i64) -> nn::SequentialT {
    // torchvision's `_efficientnet_conf("efficientnet_b0")` at width and depth
    // 1.0: expand ratio, kernel, stride, input and output channels, layers.
    const STAGES: [(i64, i64, i64, i64, i64, i64); 7] = [
        (1, 3, 1, 32, 16, 1),
        (6, 3, 2, 16, 24, 2),
        (6, 5, 2, 24, 40, 2),
        (6, 3, 2, 40, 80, 3),
        (6, 5, 1, 80, 112, 3),
        (6, 5, 2, 112, 192, 4),
        (6, 3, 1, 192, 320, 1),
    ];
    const STOCHASTIC_DEPTH_PROB: f64 = 0.2;
    const DROPOUT: f64 = 0.2;
    let f = p / "features";
    let total_blocks: i64 = STAGES.iter().map(|s| s.5).sum();
    let mut features = nn::seq_t().add(conv_bn(&(&f / 0), 3, 32, 3, 2, 1, true));
    let mut block_id = 0;
    for (i, &(expand, k, stride, c_in, c_out, layers)) in STAGES.iter().enumerate() {
        let sp = &f / (i + 1);
        let mut stage = nn::seq_t();
        for j in 0..layers {
            let (c_in, stride) = if j == 0 { (c_in, stride) } else { (c_out, 1) };
            let sd_prob = STOCHASTIC_DEPTH_PROB * block_id as f64 / total_blocks as f64;
            stage = stage.add(mbconv(&sp / j, expand, k, stride, c_in, c_out, sd_prob));
            block_id += 1;
        }
        features = features.add(stage);
    }
    let last_in = STAGES[STAGES.len() - 1].4;
    let last_out = 4 * last_in;
    features
        .add(conv_bn(&(&f / (STAGES.len() + 1)), last_in, last_out, 1, 1, 1, true))
        .add_fn_t(|xs, train| {
            let mut xs = xs.adaptive_avg_pool2d([1, 1]).flatten(1, -1);
            // `nn.Dropout(p=0.2, inplace=True)`: the mask multiplies in place.
            let _ = xs.dropout_(DROPOUT, train);
            xs
        })
        .add(nn::linear(p / "classifier" / 1, last_out, classes, Default::default()))
}
