"""The loss curve of a training run (log.json from train.py) as a PNG: training loss per step (smoothed),
held-out loss at each evaluation, for the model and its draft. Offline tool: Debian's python3-matplotlib."""
import json
import sys

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402


def smooth(values, window=10):
    out = []
    for i in range(len(values)):
        part = values[max(0, i - window + 1):i + 1]
        out.append(sum(part) / len(part))
    return out


def main(log_path, out_path, title):
    log = json.load(open(log_path))
    tokens = [e['tokens'] / 1e6 for e in log]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    ax.plot(tokens, smooth([e['loss'] for e in log]), label='model: train (10-step mean)', color='#1f77b4')
    evals = [e for e in log if 'test_loss' in e]
    ax.plot([e['tokens'] / 1e6 for e in evals], [e['test_loss'] for e in evals], 'o-', label='model: held out',
            color='#d62728')
    drafts = [e for e in log if e['draft_loss'] == e['draft_loss']]  # NaN before its first step
    ax.plot([e['tokens'] / 1e6 for e in drafts], smooth([e['draft_loss'] for e in drafts]),
            label='draft: train (10-step mean)', color='#7fb3d5', linestyle='--')
    ax.plot([e['tokens'] / 1e6 for e in evals], [e['draft_test_loss'] for e in evals], 's--', label='draft: held out',
            color='#f1948a')
    ax.set_xlabel('training tokens (millions)')
    ax.set_ylabel('cross-entropy (nats per token)')
    ax.set_ylim(bottom=min(e['test_loss'] for e in evals) - 0.3, top=min(8.5, max(e['loss'] for e in log) + 0.2))
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_path)


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2], sys.argv[3])
