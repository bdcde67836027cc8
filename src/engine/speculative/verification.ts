import type { SequenceOutput, TokenEvent } from '../sequence-output.js';
import type { Proposal } from './speculator.js';

/**
 * Settles a row's proposals against the target's logits: `at(j)` is the distribution after the row's
 * last settled token and j proposals. Proposals are judged in order (SequenceOutput.onProposal) until one is
 * replaced or the sequence finishes; when all stand, the target's own next token comes free. Returns
 * the tokens that now stand, in order, how many proposals were accepted, and how many were judged
 * (those past a finish, e.g. after a stop token that stood, never are).
 */
export function settleProposals(
  sequence: SequenceOutput,
  proposal: Proposal,
  at: (j: number) => Float32Array,
): { events: TokenEvent[]; accepted: number; verified: number } {
  const events: TokenEvent[] = [];
  let accepted = 0;
  let verified = 0;
  while (!sequence.finished) {
    if (accepted === proposal.tokens.length) {
      events.push(sequence.onLogits(at(accepted)));
      break;
    }
    const { event, accepted: stands } = sequence.onProposal(
      at(accepted),
      proposal.tokens[accepted],
      proposal.q[accepted],
    );
    verified++;
    events.push(event);
    if (!stands) break;
    accepted++;
  }
  return { events, accepted, verified };
}
