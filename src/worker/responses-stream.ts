/**
 * A response's generation as the Responses API streams it: `response.created`, `response.in_progress`,
 * then per output item `response.output_item.added`, its content part, its deltas
 * (`response.reasoning_text.delta`, `response.output_text.delta`, `response.function_call_arguments.delta`)
 * and their `.done` events, then `response.completed` (or `response.incomplete`) with the finished
 * response the object built and stored. Items get the ids the object gives them (output-items.ts), so the
 * streamed items and the stored ones agree.
 */
import type { WireEvent } from '../objects/generation-run.js';
import { itemIds, outputText, type OutputItem } from '../responses/output-items.js';
import { ReasoningSplitter, type ReasoningFormat } from '../responses/reasoning.js';
import type { ResponseView } from '../responses/response-view.js';
import { ApiError } from './errors.js';
import { ToolCallParser } from './tool-calls.js';

type Event = Record<string, unknown> & { type: string };

interface OpenItem {
  kind: 'reasoning' | 'message' | 'function_call';
  id: string;
  outputIndex: number;
  text: string;
  closed: boolean;
}

export async function* responseEvents(
  events: AsyncIterable<WireEvent>,
  start: ResponseView,
  reasoning: ReasoningFormat | undefined,
  parseTools: boolean,
): AsyncGenerator<Event> {
  let sequence = 0;
  const event = (type: string, fields: Record<string, unknown>): Event => ({
    type,
    sequence_number: sequence++,
    ...fields,
  });
  const id = start.id;
  const splitter = new ReasoningSplitter(reasoning);
  const parser = parseTools ? new ToolCallParser() : undefined;
  const items: OpenItem[] = [];
  const calls = new Map<number, OpenItem>();
  let thinking: OpenItem | undefined;
  let message: OpenItem | undefined;
  let heldSpace = '';

  yield event('response.created', { response: start });
  yield event('response.in_progress', { response: start });

  const open = function* (
    kind: OpenItem['kind'],
    itemId: string,
    item: Record<string, unknown>,
  ): Generator<Event, OpenItem> {
    const opened: OpenItem = { kind, id: itemId, outputIndex: items.length, text: '', closed: false };
    items.push(opened);
    yield event('response.output_item.added', { output_index: opened.outputIndex, item });
    if (kind !== 'function_call')
      yield event('response.content_part.added', {
        item_id: itemId,
        output_index: opened.outputIndex,
        content_index: 0,
        part: kind === 'message' ? outputText('') : { type: 'reasoning_text', text: '' },
      });
    return opened;
  };

  const closeThinking = function* (final?: OutputItem): Generator<Event> {
    if (!thinking || thinking.closed) return;
    thinking.closed = true;
    const text = final?.type === 'reasoning' ? final.content.map((c) => c.text).join('') : thinking.text;
    const part = { type: 'reasoning_text', text };
    const at = { item_id: thinking.id, output_index: thinking.outputIndex, content_index: 0 };
    yield event('response.reasoning_text.done', { ...at, text });
    yield event('response.content_part.done', { ...at, part });
    yield event('response.output_item.done', {
      output_index: thinking.outputIndex,
      item: final ?? { type: 'reasoning', id: thinking.id, summary: [], content: [part], status: 'completed' },
    });
  };

  const onContent = function* (text: string): Generator<Event> {
    if (text === '') return;
    if (!message) {
      // Blank text before anything else is held: a reply that is only calls has no message item.
      if ((heldSpace + text).trim() === '') {
        heldSpace += text;
        return;
      }
      yield* closeThinking();
      message = yield* open('message', itemIds.message(id), {
        type: 'message',
        id: itemIds.message(id),
        status: 'in_progress',
        role: 'assistant',
        content: [],
      });
      text = heldSpace + text;
      heldSpace = '';
    }
    message.text += text;
    yield event('response.output_text.delta', {
      item_id: message.id,
      output_index: message.outputIndex,
      content_index: 0,
      delta: text,
      logprobs: [],
    });
  };

  const onText = function* (text: string, counts: boolean): Generator<Event> {
    const split = counts ? splitter.push(text) : splitter.flush();
    if (split.reasoning !== '') {
      thinking ??= yield* open('reasoning', itemIds.reasoning(id), {
        type: 'reasoning',
        id: itemIds.reasoning(id),
        summary: [],
        content: [],
        status: 'in_progress',
      });
      thinking.text += split.reasoning;
      yield event('response.reasoning_text.delta', {
        item_id: thinking.id,
        output_index: thinking.outputIndex,
        content_index: 0,
        delta: split.reasoning,
      });
    }
    if (split.content === '' && counts) return;
    const parsed = parser ? parser.push(split.content) : { content: split.content, deltas: [] };
    yield* onContent(parsed.content);
    for (const delta of parsed.deltas) {
      let call = calls.get(delta.index);
      if (!call) {
        yield* closeThinking();
        call = yield* open('function_call', itemIds.call(id, delta.index), {
          type: 'function_call',
          id: itemIds.call(id, delta.index),
          call_id: itemIds.callId(id, delta.index),
          name: delta.function.name,
          arguments: '',
          status: 'in_progress',
        });
        calls.set(delta.index, call);
      }
      if (delta.function.arguments !== '') {
        call.text += delta.function.arguments;
        yield event('response.function_call_arguments.delta', {
          item_id: call.id,
          output_index: call.outputIndex,
          delta: delta.function.arguments,
        });
      }
    }
    if (!counts && parser) yield* onContent(parser.flush());
  };

  for await (const wire of events) {
    if (wire.type === 'error') throw ApiError.from(wire.error);
    if (wire.type === 'token') {
      yield* onText(wire.text, true);
      continue;
    }
    yield* onText('', false);
    const final = wire.response;
    if (!final) throw new Error('the response ended without its record');
    const finalItem = (itemId: string): OutputItem | undefined => final.output.find((item) => item.id === itemId);
    if (!message && calls.size === 0 && finalItem(itemIds.message(id))) {
      yield* closeThinking(thinking && finalItem(thinking.id));
      message = yield* open('message', itemIds.message(id), {
        type: 'message',
        id: itemIds.message(id),
        status: 'in_progress',
        role: 'assistant',
        content: [],
      });
    }
    for (const item of items) {
      const done = finalItem(item.id);
      if (item.kind === 'reasoning') yield* closeThinking(done);
      else if (item.kind === 'message') {
        const text = done?.type === 'message' ? done.content.map((c) => c.text).join('') : item.text;
        const at = { item_id: item.id, output_index: item.outputIndex, content_index: 0 };
        yield event('response.output_text.done', { ...at, text, logprobs: [] });
        yield event('response.content_part.done', { ...at, part: outputText(text) });
        yield event('response.output_item.done', { output_index: item.outputIndex, item: done });
      } else {
        const args = done?.type === 'function_call' ? done.arguments : item.text;
        yield event('response.function_call_arguments.done', {
          item_id: item.id,
          output_index: item.outputIndex,
          arguments: args,
          ...(done?.type === 'function_call' ? { name: done.name } : {}),
        });
        yield event('response.output_item.done', { output_index: item.outputIndex, item: done });
      }
    }
    yield event(final.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response: final });
  }
}
