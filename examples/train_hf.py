"""A Hugging Face `Trainer` job, as a transformers user writes it: a small
GPT-2 built from a config (no download), a data set of random token
sequences, the Trainer's own loop and optimizer (AdamW). vramprobe sweeps it
unmodified (needs `pip install transformers`; the search benchmark installs
it for itself):

    vramprobe sweep -- python examples/train_hf.py --batch-size {batch}
"""
import argparse
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n, vocab, length):
        self.n, self.vocab, self.length = n, vocab, length

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        ids = torch.randint(0, self.vocab, (self.length,))
        return {"input_ids": ids, "labels": ids}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seq-len", type=int, default=128)
    a = p.parse_args()
    config = GPT2Config(vocab_size=2000, n_positions=a.seq_len, n_embd=128, n_layer=4, n_head=4)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="train_hf-"),
        per_device_train_batch_size=a.batch_size,
        max_steps=a.steps,
        save_strategy="no",
        report_to=[],
        logging_steps=10,
        dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(),
    )
    Trainer(model=model, args=args, train_dataset=RandomTokens(a.batch_size * a.steps, 2000, a.seq_len)).train()


if __name__ == "__main__":
    main()
