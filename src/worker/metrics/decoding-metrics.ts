import { eachEngine } from './readers.js';
import type { MetricDefinition } from './metric.js';

/** Speculative decoding and structured-output grammars. */
export const DECODING_METRICS: MetricDefinition[] = [
  {
    name: 'edge_infer_speculative_proposed_tokens_total',
    type: 'counter',
    help: 'Speculative tokens proposed and verified by the target.',
    samples: eachEngine((e) => e.proposedTokens),
  },
  {
    name: 'edge_infer_speculative_accepted_tokens_total',
    type: 'counter',
    help: 'Speculative tokens the target accepted (acceptance rate = accepted / proposed).',
    samples: eachEngine((e) => e.acceptedTokens),
  },
  {
    name: 'edge_infer_grammar_compile_seconds',
    type: 'histogram',
    help: 'Time to compile a structured-output grammar (JSON schema, regex, choice, EBNF, forced tool call) for the tokenizer; cache hits excluded.',
    samples: ({ loaded }) => loaded.map(({ labels, engine }) => [labels, engine.grammar.compileSeconds]),
  },
  {
    name: 'edge_infer_grammar_cache_hits_total',
    type: 'counter',
    help: 'Structured-output requests whose grammar was already compiled (cached per schema and tokenizer).',
    samples: eachEngine((e) => e.grammar.cacheHits),
  },
];
