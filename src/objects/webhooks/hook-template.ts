/**
 * A hook's prompt template: Jinja, rendered by @huggingface/jinja (the interpreter that renders chat
 * templates; no eval, so fine in workerd) over the inbound event. The event is available as `event`,
 * and an object event's top-level keys also as variables (`{{ title }}` for `{"title": ...}`).
 *
 * Rendering runs on the shard's one thread, so it is budgeted while it runs: a template of nested loops
 * once rendered for 11.7 s with every other stream of the shard waiting, its size checked only after.
 */
import { Environment, Interpreter, Template } from '@huggingface/jinja';

export const MAX_TEMPLATE_CHARS = 32 * 1024;
/** Rendered prompts longer than this are refused; so is any string the template builds on the way. */
export const MAX_RENDERED_CHARS = 256 * 1024;
/**
 * Evaluation steps one render may take: every expression and statement is a step, and a for loop costs
 * the length of what it iterates too, so nested loops are charged for each iteration even when their
 * body is empty. A step costs 2-10 µs here, so the budget bounds a render to well under a second.
 */
export const MAX_TEMPLATE_STEPS = 20_000;

class TemplateBudgetError extends Error {}

/** The interpreter with a step budget and a bound on every string it makes. */
class BudgetedInterpreter extends Interpreter {
  private steps = 0;
  /** The nodes that a for loop iterates over: what they yield is charged by its length. */
  private readonly iterables = new WeakSet<object>();

  override evaluate(...args: Parameters<Interpreter['evaluate']>): ReturnType<Interpreter['evaluate']> {
    const [statement] = args;
    this.charge(1);
    if (statement?.type === 'For') {
      const { iterable } = statement as unknown as { iterable: { type: string; lhs?: object } };
      this.iterables.add(iterable.type === 'SelectExpression' && iterable.lhs ? iterable.lhs : iterable);
    }
    const value = super.evaluate(...args);
    if (value.type === 'StringValue' && (value.value as string).length > MAX_RENDERED_CHARS)
      throw new TemplateBudgetError(`the template built a string longer than ${MAX_RENDERED_CHARS} characters`);
    if (statement && this.iterables.has(statement)) {
      if (value.type === 'ArrayValue') this.charge((value.value as unknown[]).length);
      else if (value.type === 'ObjectValue') this.charge((value.value as Map<string, unknown>).size);
    }
    return value;
  }

  charge(steps: number): void {
    this.steps += steps;
    if (this.steps > MAX_TEMPLATE_STEPS)
      throw new TemplateBudgetError(`the template took more than ${MAX_TEMPLATE_STEPS} steps to render`);
  }
}

/** Jinja's range, refusing a list longer than the whole step budget before it is built. */
function boundedRange(start: number, stop?: number, step = 1): number[] {
  const [from, to] = stop === undefined ? [0, start] : [start, stop];
  if (step === 0) throw new Error('range() step must not be zero');
  const length = Math.max(0, Math.ceil((to - from) / step));
  if (length > MAX_TEMPLATE_STEPS) throw new TemplateBudgetError(`range() of ${length} items is past the budget`);
  return Array.from({ length }, (_, i) => from + i * step);
}

/** The globals @huggingface/jinja's Template.render sets, with range bounded (strftime_now left out). */
function hookEnvironment(items: Record<string, unknown>): Environment {
  const env = new Environment();
  for (const [name, value] of [
    ['false', false],
    ['true', true],
    ['none', null],
    ['False', false],
    ['True', true],
    ['None', null],
  ] as const)
    env.set(name, value);
  env.set('raise_exception', (message: string) => {
    throw new Error(message);
  });
  env.set('range', boundedRange);
  for (const [name, value] of Object.entries(items)) env.set(name, value);
  return env;
}

const compiled = new Map<string, Template>();

/** Parses the template once (parsing is far dearer than rendering); throws with the parser's message. */
function compile(source: string): Template {
  let template = compiled.get(source);
  if (!template) {
    template = new Template(source);
    if (compiled.size > 256) compiled.clear();
    compiled.set(source, template);
  }
  return template;
}

/** null when the template is usable, otherwise why not. */
export function checkTemplate(source: unknown): string | null {
  if (typeof source !== 'string' || source.trim() === '') return 'template must be a non-empty string';
  if (source.length > MAX_TEMPLATE_CHARS) return `template is longer than ${MAX_TEMPLATE_CHARS} characters`;
  try {
    compile(source);
    return null;
  } catch (err) {
    return `template does not parse: ${err instanceof Error ? err.message : String(err)}`;
  }
}

/** Renders the template over an event; throws Error with a readable message when rendering fails. */
export function renderHookTemplate(source: string, event: unknown, hook: string): string {
  const spread =
    typeof event === 'object' && event !== null && !Array.isArray(event) ? (event as Record<string, unknown>) : {};
  let text: string;
  try {
    const interpreter = new BudgetedInterpreter(hookEnvironment({ ...spread, event, hook }));
    text = interpreter.run(compile(source).parsed).value as string;
  } catch (err) {
    if (err instanceof TemplateBudgetError) throw new Error(`the hook's template is refused: ${err.message}`);
    throw new Error(`the hook's template failed on this event: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (text.trim() === '') throw new Error("the hook's template rendered an empty prompt for this event");
  if (text.length > MAX_RENDERED_CHARS)
    throw new Error(`the rendered prompt is longer than ${MAX_RENDERED_CHARS} characters`);
  return text;
}
