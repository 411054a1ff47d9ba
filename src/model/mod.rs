//! The built-in models, by torchvision name, each with its default input and
//! class count. Parameter counts equal torchvision's for the same name.
mod alexnet;
mod densenet;
mod efficientnet;
mod inception;
mod layers;
mod resnet;
mod vgg;

use tch::{nn, nn::ModuleT, vision, Tensor};

use crate::error::UsageError;

/// What a forward pass returns in training: the logits, plus auxiliary logits
/// where the architecture trains with them (inception_v3).
pub struct Outputs {
    pub logits: Tensor,
    pub aux: Option<Tensor>,
}

/// A trainable network.
pub trait Network: std::fmt::Debug + Send {
    fn forward(&self, xs: &Tensor, train: bool) -> Outputs;
}

/// A tch `ModuleT` with a single output.
#[derive(Debug)]
struct Plain<M>(M);

impl<M: ModuleT> Network for Plain<M> {
    fn forward(&self, xs: &Tensor, train: bool) -> Outputs {
        Outputs { logits: self.0.forward_t(xs, train), aux: None }
    }
}

fn plain<M: ModuleT + 'static>(m: M) -> Box<dyn Network> {
    Box::new(Plain(m))
}

type Builder = fn(&nn::Path, i64) -> Box<dyn Network>;

/// A registry entry.
pub struct ModelSpec {
    pub name: &'static str,
    /// Channels x height x width the model was designed for.
    pub default_input: [i64; 3],
    pub default_classes: i64,
    pub family: &'static str,
    build: Builder,
}

const IMAGENET: [i64; 3] = [3, 224, 224];

const MODELS: &[ModelSpec] = &[
    ModelSpec {
        name: "resnet18",
        default_input: IMAGENET,
        default_classes: 1000,
        family: "ResNet",
        build: |p, c| Box::new(resnet::resnet18(p, c)),
    },
    ModelSpec {
        name: "resnet34",
        default_input: IMAGENET,
        default_classes: 1000,
        family: "ResNet",
        build: |p, c| Box::new(resnet::resnet34(p, c)),
    },
    ModelSpec {
        name: "resnet50",
        default_input: IMAGENET,
        default_classes: 1000,
        family: "ResNet",
        build: |p, c| Box::new(resnet::resnet50(p, c)),
    },
    ModelSpec {
        name: "resnet101",
        default_input: IMAGENET,
        default_classes: 1000,
        family: "ResNet",
        build: |p, c| Box::new(resnet::resnet101(p, c)),
    },
    ModelSpec {
        name: "resnet152",
        default_input: IMAGENET,
        default_classes: 1000,
        family: "ResNet",
        build: |p, c| Box::new(resnet::resnet152(p, c)),
    },
    ModelSpec {
        name: "vgg11",
        default_input: IMAGENET,
        default_classes: 1000,
        family: "VGG",
        build: |p, c| plain(vgg::vgg11(p, c)),
    },
    ModelSpec {
        name: "vgg16",
        default_input: IMAGENET,
        default_classes: 1000,
        family: "VGG",
        build: |p, c| plain(vgg::vgg16(p, c)),
    },
    ModelSpec {
        name: "vgg16_bn",
        default_input: IMAGENET,
        default_classes: 1000,
        family: "VGG",
        build: |p, c| plain(vgg::vgg16_bn(p, c)),
    },
    ModelSpec {
        name: "densenet121",
        default_input: IMAGENET,
        default_classes: 1000,
        family: "DenseNet",
        build: |p, c| plain(densenet::densenet121(p, c)),
    },
    ModelSpec {
        name: "mobilenet_v2",
        default_input: IMAGENET,
        default_classes: 1000,
        family: "MobileNet",
        build: |p, c| plain(vision::mobilenet::v2(p, c)),
    },
    ModelSpec {
        name: "efficientnet_b0",
        default_input: IMAGENET,
        default_classes: 1000,
        family: "EfficientNet",
        build: |p, c| plain(efficientnet::b0(p, c)),
    },
    ModelSpec {
        name: "squeezenet1_1",
        default_input: IMAGENET,
        default_classes: 1000,
        family: "SqueezeNet",
        build: |p, c| plain(vision::squeezenet::v1_1(p, c)),
    },
    ModelSpec {
        name: "alexnet",
        default_input: IMAGENET,
        default_classes: 1000,
        family: "AlexNet",
        build: |p, c| plain(alexnet::alexnet(p, c)),
    },
    ModelSpec {
        name: "inception_v3",
        default_input: [3, 299, 299],
        default_classes: 1000,
        family: "Inception",
        build: |p, c| Box::new(inception::v3(p, c)),
    },
];

/// Every built-in model, in listing order.
pub fn all() -> &'static [ModelSpec] {
    MODELS
}

/// Looks a model up by name; the error lists the known ones.
pub fn find(name: &str) -> Result<&'static ModelSpec, UsageError> {
    MODELS.iter().find(|m| m.name == name).ok_or_else(|| {
        let known: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
        UsageError::new(format!("unknown model '{name}'; known models: {}", known.join(", ")))
    })
}

impl ModelSpec {
    /// Builds the network's variables under `path` (on the path's device).
    pub fn build(&self, path: &nn::Path, classes: i64) -> Box<dyn Network> {
        (self.build)(path, classes)
    }

    /// Trainable parameter count at `classes` outputs, built on the CPU
    /// (weights are initialised once; nothing runs through the network).
    pub fn parameter_count(&self, classes: i64) -> i64 {
        let vs = nn::VarStore::new(tch::Device::Cpu);
        let _net = self.build(&vs.root(), classes);
        parameter_count(&vs)
    }
}

/// Trainable parameters held by a variable store (buffers such as batch norm
/// running statistics are not parameters).
pub fn parameter_count(vs: &nn::VarStore) -> i64 {
    vs.trainable_variables().iter().map(Tensor::numel).map(|n| n as i64).sum()
}
