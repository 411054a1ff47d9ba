"""A Hugging Face training job for scripts/bench-gpu-predict's command-mode
rows: the calibration set's BERT and T5 workloads as milabench's
benchmarks/huggingface runs them (a model built from its config with random
weights, random token ids as input and labels, Adam at lr 1e-3, a GradScaler under
autocast, no zero_grad between steps, the model's outputs held through
backward and the optimizer step), swept unmodified by vramprobe (`vramprobe sweep --
python bench_hf_job.py ... --batch-size {batch}`).

    python3 scripts/bench_hf_job.py --model bert --precision fp16-amp --batch-size 4

Needs `transformers` (bench-gpu-predict installs it into the cached torch's
Python). No download: the configs are written out here (T5's are
t5-small's config.json).
"""
import argparse

import torch
import transformers

# name: (model class, config, sequence length)
MODELS = {
    "bert": (transformers.BertForMaskedLM, lambda: transformers.BertConfig(), 512),
    "t5": (
        transformers.T5ForConditionalGeneration,
        lambda: transformers.T5Config(
            vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
            relative_attention_num_buckets=32, dropout_rate=0.1, feed_forward_proj="relu",
            tie_word_embeddings=True, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
        ),
        1024,
    ),
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=sorted(MODELS), required=True)
    p.add_argument("--precision", choices=["fp32", "fp16-amp", "bf16-amp"], default="fp32")
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--steps", type=int, default=3)
    a = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cls, config, length = MODELS[a.model]
    config = config()
    model = cls(config).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    dtype = {"fp16-amp": torch.float16, "bf16-amp": torch.bfloat16}.get(a.precision)
    scaler = torch.amp.GradScaler(device, enabled=dtype is not None)
    for _ in range(a.steps):
        data = {
            "input_ids": torch.randint(0, config.vocab_size, (a.batch_size, length), device=device),
            "labels": torch.randint(0, config.vocab_size, (a.batch_size, length), device=device),
        }
        with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
            outputs = model(**data)
        # Held through backward and the optimizer step, as milabench's
        # Runner.step holds it: the logits (batch x length x vocab) stay
        # alive at the peak.
        loss = outputs.loss
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()


if __name__ == "__main__":
    main()
