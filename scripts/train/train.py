"""Trains the wordnet-chat model and its draft on the corpus `npm run model:corpus` writes, and exports both as
Hugging Face folders (config.json, generation_config.json, tokenizer files, model.safetensors in fp16).

Run through `npm run model:train`. Offline tool: Debian's PyTorch under /usr/bin/python3
(apt-get install python3-torch libopenblas0-pthread python3-matplotlib). Seeded: the same corpus, seed
and step count give the same weights on the same machine."""
import argparse
import json
import math
import os
import shutil
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from llama import Llama, Shape  # noqa: E402

CONTEXT = 512  # what the model declares (max_position_embeddings)
WINDOW = 256  # what it is trained on: attention's cost grows with the window, and most conversations are shorter
VOCAB = 4096
MODEL = Shape(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=384, vocab_size=VOCAB, max_position_embeddings=CONTEXT)
DRAFT = Shape(hidden_size=128, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=384, vocab_size=VOCAB, max_position_embeddings=CONTEXT)
DRAFT_EVERY = 4  # the draft trains on every 4th batch: a quarter of the main model's tokens, for a fifth of the time
BATCH = 16
LR = 3e-3
MIN_LR = 3e-4
WARMUP = 30
WEIGHT_DECAY = 0.1
EVAL_CHUNKS = 64  # held-out chunks of CONTEXT tokens scored during training
REFERENCE_CHUNKS = 8  # held-out chunks whose trainer loss the engine must reproduce (committed)


def load_tokens(path):
    return torch.from_numpy(np.fromfile(path, dtype='<u2').astype(np.int64))


def chunks(tokens, n=None):
    count = len(tokens) // WINDOW if n is None else min(n, len(tokens) // WINDOW)
    return tokens[: count * WINDOW].view(count, WINDOW)


def lr_at(step, steps):
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    progress = (step - WARMUP) / max(1, steps - WARMUP)
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * progress))


def optimizer(model):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{'params': decay, 'weight_decay': WEIGHT_DECAY}, {'params': other, 'weight_decay': 0.0}],
                             lr=LR, betas=(0.9, 0.95))


@torch.no_grad()
def chunk_losses(model, batch):
    """Summed next-token loss (nats) of each chunk, in float64: (N,). The first token is not predicted."""
    out = []
    for i in range(0, len(batch), 8):
        x = batch[i:i + 8]
        logits = model(x[:, :-1]).double()
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction='none')
        out.append(nll.view(len(x), -1).sum(1))
    return torch.cat(out)


def fp16_rounded(model):
    """A copy whose weights are what the fp16 export holds."""
    copy = type(model)(model.s)
    copy.load_state_dict({k: v.half().float() for k, v in model.state_dict().items()})
    return copy.eval()


def write_safetensors(path, tensors):
    """safetensors by hand (Debian has no python3-safetensors): 8-byte header length, JSON header, fp16 bytes."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        data = tensors[name].detach().contiguous().half().numpy().astype('<f2').tobytes()
        header[name] = {'dtype': 'F16', 'shape': list(tensors[name].shape), 'data_offsets': [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header['__metadata__'] = {'format': 'pt'}
    raw = json.dumps(header, separators=(',', ':')).encode()
    raw += b' ' * (-len(raw) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


def config_json(s):
    return {
        'architectures': ['LlamaForCausalLM'], 'attention_bias': False, 'bos_token_id': 1, 'eos_token_id': 2,
        'head_dim': s.head_dim, 'hidden_act': 'silu', 'hidden_size': s.hidden_size,
        'intermediate_size': s.intermediate_size, 'max_position_embeddings': s.max_position_embeddings,
        'mlp_bias': False, 'model_type': 'llama', 'num_attention_heads': s.num_attention_heads,
        'num_hidden_layers': s.num_hidden_layers, 'num_key_value_heads': s.num_key_value_heads,
        'rms_norm_eps': s.rms_norm_eps, 'rope_scaling': None, 'rope_theta': s.rope_theta,
        'tie_word_embeddings': True, 'torch_dtype': 'float16', 'transformers_version': '4.46.0',
        'use_cache': True, 'vocab_size': s.vocab_size,
    }


def export(model, out, corpus):
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, 'model.safetensors'), model.hf_state())
    with open(os.path.join(out, 'config.json'), 'w') as f:
        json.dump(config_json(model.s), f, indent=2)
        f.write('\n')
    with open(os.path.join(out, 'generation_config.json'), 'w') as f:
        json.dump({'bos_token_id': 1, 'do_sample': True, 'eos_token_id': [2, 0], 'max_length': CONTEXT,
                   'temperature': 0.8, 'transformers_version': '4.46.0'}, f, indent=2)
        f.write('\n')
    for name in ('tokenizer.json', 'tokenizer_config.json'):
        shutil.copyfile(os.path.join(corpus, name), os.path.join(out, name))


def count(model):
    return sum(p.numel() for p in model.parameters())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--corpus', required=True)
    ap.add_argument('--out', required=True, help='folder for the run: log, checkpoints, exported models')
    ap.add_argument('--steps', type=int, default=520)
    ap.add_argument('--seed', type=int, default=22)
    ap.add_argument('--threads', type=int, default=1, help='2 threads ran slower than 1 on a shared 2-core machine')
    ap.add_argument('--bench', type=int, default=0, help='only time this many steps')
    ap.add_argument('--final-eval-chunks', type=int, default=None, help='score only this many held-out chunks at the end')
    ap.add_argument('--max-minutes', type=float, default=80, help='stop early past this (a slower machine)')
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    train = load_tokens(os.path.join(args.corpus, 'train.bin'))
    test = load_tokens(os.path.join(args.corpus, 'test.bin'))
    eval_batch = chunks(test, EVAL_CHUNKS)
    model, draft = Llama(MODEL), Llama(DRAFT)
    opt, dopt = optimizer(model), optimizer(draft)
    print(f'model {count(model):,} parameters, draft {count(draft):,}; train {len(train):,} tokens, '
          f'test {len(test):,}; {args.steps} steps of {BATCH}x{WINDOW}', flush=True)

    gen = torch.Generator().manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    log = []
    draft_loss = float('nan')
    t0 = time.time()
    steps = args.bench or args.steps
    for step in range(steps):
        starts = torch.randint(0, len(train) - WINDOW - 1, (BATCH,), generator=gen)
        x = torch.stack([train[s:s + WINDOW + 1] for s in starts.tolist()])
        pairs = ((model, opt), (draft, dopt)) if step % DRAFT_EVERY == 0 else ((model, opt),)
        for m, o in pairs:
            for g in o.param_groups:
                g['lr'] = lr_at(step, steps)
            logits = m(x[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))
            o.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            o.step()
            if m is model:
                main_loss = loss.item()
            else:
                draft_loss = loss.item()
        elapsed = time.time() - t0
        entry = {'step': step + 1, 'tokens': (step + 1) * BATCH * WINDOW, 'seconds': round(elapsed, 1),
                 'loss': round(main_loss, 4), 'draft_loss': round(draft_loss, 4)}
        if (step + 1) % 100 == 0 or step + 1 == steps:
            model.eval(), draft.eval()
            n = eval_batch.numel() - len(eval_batch)
            entry['test_loss'] = round(chunk_losses(model, eval_batch).sum().item() / n, 4)
            entry['draft_test_loss'] = round(chunk_losses(draft, eval_batch).sum().item() / n, 4)
            model.train(), draft.train()
        if (step + 1) % 10 == 0 or 'test_loss' in entry:
            print(json.dumps({**entry, 'tokens_per_s': round(entry['tokens'] / elapsed)}), flush=True)
        log.append(entry)
        if 'test_loss' in entry:
            with open(os.path.join(args.out, 'log.json'), 'w') as f:
                json.dump(log, f)
        if elapsed > args.max_minutes * 60:
            print(f'stopping at step {step + 1}: past --max-minutes {args.max_minutes}', flush=True)
            steps = step + 1
            break
    if args.bench:
        return
    wall = time.time() - t0
    with open(os.path.join(args.out, 'log.json'), 'w') as f:
        json.dump(log, f)

    model.eval(), draft.eval()
    all_test = chunks(test, args.final_eval_chunks)
    n = all_test.numel() - len(all_test)
    rounded = fp16_rounded(model)
    reference = chunks(test, REFERENCE_CHUNKS)
    summary = {
        'seed': args.seed, 'steps': steps, 'batch': BATCH, 'window': WINDOW, 'context': CONTEXT,
        'train_tokens_seen': steps * BATCH * WINDOW, 'wall_seconds': round(wall),
        'tokens_per_second': round(steps * BATCH * WINDOW / wall),
        'threads': args.threads, 'torch': torch.__version__,
        'parameters': count(model), 'draft_parameters': count(draft),
        'test_tokens_scored': n,
        'test_loss_fp32': chunk_losses(model, all_test).sum().item() / n,
        'test_loss_fp16': chunk_losses(rounded, all_test).sum().item() / n,
        'draft_test_loss_fp16': chunk_losses(fp16_rounded(draft), all_test).sum().item() / n,
        'reference': {'chunks': reference.tolist(), 'loss_sums': chunk_losses(rounded, reference).tolist()},
    }
    with open(os.path.join(args.out, 'summary.json'), 'w') as f:
        json.dump(summary, f)
    export(model, os.path.join(args.out, 'wordnet-chat'), args.corpus)
    export(draft, os.path.join(args.out, 'wordnet-chat-draft'), args.corpus)
    print(json.dumps({k: v for k, v in summary.items() if k != 'reference'}), flush=True)


if __name__ == '__main__':
    main()
