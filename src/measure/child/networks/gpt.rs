//! A GPT-style decoder, op for op as nanoGPT's `GPT` (the common reference
//! implementation of GPT-2): token and position embeddings, pre-norm blocks
//! of causal self-attention (PyTorch's scaled_dot_product_attention) and a
//! GELU MLP, a final LayerNorm, and the output layer tied to the token
//! embedding. Dropout is 0 (nanoGPT's default for fine-tuning), so no masks.
//! Variable names follow nanoGPT's state dict.
use tch::{nn, nn::Module, Kind, TchError, Tensor};

use super::{Network, Outputs};

/// Shape of a GPT: layers, heads, width and the longest context it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GptShape {
    pub layers: i64,
    pub heads: i64,
    pub width: i64,
    pub context: i64,
}

/// GPT-2's vocabulary (50,257 tokens), the default class count.

#[derive(Debug)]
struct Block {
    ln_1: nn::LayerNorm,
    c_attn: nn::Linear,
    attn_proj: nn::Linear,
    ln_2: nn::LayerNorm,
    c_fc: nn::Linear,
    mlp_proj: nn::Linear,
    heads: i64,
}

impl Block {
    fn new(p: nn::Path, width: i64, heads: i64) -> Block {
        let ln = |p: nn::Path| nn::layer_norm(p, vec![width], Default::default());
        let attn = &p / "attn";
        let mlp = &p / "mlp";
        Block {
            ln_1: ln(&p / "ln_1"),
            c_attn: nn::linear(&attn / "c_attn", width, 3 * width, Default::default()),
            attn_proj: nn::linear(&attn / "c_proj", width, width, Default::default()),
            ln_2: ln(&p / "ln_2"),
            c_fc: nn::linear(&mlp / "c_fc", width, 4 * width, Default::default()),
            mlp_proj: nn::linear(&mlp / "c_proj", 4 * width, width, Default::default()),
            heads,
        }
    }

    /// nanoGPT's `CausalSelfAttention.forward`.
    fn attention(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let (b, t, c) = x.size3()?;
        let qkv = self.c_attn.forward(x);
        let parts = qkv.f_split(c, 2)?;
        let heads = |t_: &Tensor| t_.f_view([b, t, self.heads, c / self.heads])?.f_transpose(1, 2);
        let (q, k, v) = (heads(&parts[0])?, heads(&parts[1])?, heads(&parts[2])?);
        let y = Tensor::f_scaled_dot_product_attention::<Tensor>(&q, &k, &v, None, 0.0, true, None, false)?;
        let y = y.f_transpose(1, 2)?.f_contiguous()?.f_view([b, t, c])?;
        Ok(self.attn_proj.forward(&y))
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let x = x.f_add(&self.attention(&self.ln_1.forward(x))?)?;
        let mlp = self.mlp_proj.forward(&self.c_fc.forward(&self.ln_2.forward(&x)).f_gelu("none")?);
        x.f_add(&mlp)
    }
}

#[derive(Debug)]
pub struct Gpt {
    wte: nn::Embedding,
    wpe: nn::Embedding,
    blocks: Vec<Block>,
    ln_f: nn::LayerNorm,
    context: i64,
}

pub fn gpt(p: &nn::Path, shape: GptShape, vocab: i64) -> Gpt {
    let tr = p / "transformer";
    let h = &tr / "h";
    Gpt {
        wte: nn::embedding(&tr / "wte", vocab, shape.width, Default::default()),
        wpe: nn::embedding(&tr / "wpe", shape.context, shape.width, Default::default()),
        blocks: (0..shape.layers).map(|i| Block::new(&h / i, shape.width, shape.heads)).collect(),
        ln_f: nn::layer_norm(&tr / "ln_f", vec![shape.width], Default::default()),
        context: shape.context,
    }
}

impl Gpt {
    /// Logits for every position, batch x length x vocabulary.
    fn logits(&self, tokens: &Tensor) -> Result<Tensor, TchError> {
        let (_, t) = tokens.size2()?;
        if t > self.context {
            return Err(TchError::Shape(format!(
                "sequence length {t} is longer than the model's context {}",
                self.context
            )));
        }
        let pos = Tensor::f_arange(t, (Kind::Int64, tokens.device()))?;
        let mut x = self.wte.forward(tokens).f_add(&self.wpe.forward(&pos))?;
        for block in &self.blocks {
            x = block.forward(&x)?;
        }
        // The output layer shares the token embedding's weight (weight tying).
        self.ln_f.forward(&x).f_linear::<Tensor>(&self.wte.ws, None)
    }
}

impl Network for Gpt {
    fn forward(&self, xs: &Tensor, _train: bool) -> Result<Outputs, TchError> {
        Ok(Outputs { logits: self.logits(xs)?, aux: None })
    }
}
