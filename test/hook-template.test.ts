import { describe, expect, it } from 'vitest';
import { MAX_RENDERED_CHARS, MAX_TEMPLATE_STEPS, renderHookTemplate } from '../src/objects/webhooks/hook-template.js';

const event = { title: 'Q3 report', items: Array.from({ length: 300 }, (_, i) => i) };
const render = (template: string) => renderHookTemplate(template, event, 'summarise');

describe('hook templates render within a budget', () => {
  it('renders what templates use: variables, loops, filters, conditions, range', () => {
    expect(render('Summarise {{ title }}: {% for i in items[:3] %}{{ i }};{% endfor %}')).toBe(
      'Summarise Q3 report: 0;1;2;',
    );
    expect(render('{{ event.items | length }} {{ hook | upper }}{% if title %}!{% endif %}')).toBe('300 SUMMARISE!');
    expect(render('{% for i in range(2, 10, 3) %}{{ i }}{% endfor %}')).toBe('258');
    expect(render('{% for i in range(3) %}{{ i }}{% endfor %}{{ true }}{{ none is none }}')).toBe('012truetrue');
    // A loop over the whole event stays well within the budget.
    expect(render('{% for i in items %}{{ i }},{% endfor %}')).toHaveLength(1090);
  });

  it('refuses nested loops past the step budget while rendering, even with empty bodies', () => {
    for (const body of ['x', '']) {
      const template = `{% for a in items %}{% for b in items %}{% for c in items %}${body}{% endfor %}{% endfor %}{% endfor %}`;
      expect(() => render(template)).toThrow(`more than ${MAX_TEMPLATE_STEPS} steps`);
    }
    expect(() => render('{% for a in items %}{% for b in items %}{{ a }}{% endfor %}{% endfor %}')).toThrow('steps');
  });

  it('refuses a range longer than the budget before building it', () => {
    expect(() => render('{% for i in range(100000000) %}x{% endfor %}')).toThrow('range() of 100000000 items');
    expect(() => render('{% for i in range(5, 1, 0) %}x{% endfor %}')).toThrow('step must not be zero');
  });

  it('refuses a string past the rendered limit as soon as one is built, not after', () => {
    // Doubling 40 times would be 2^41 characters: refused at the first string past the limit.
    const doubling =
      "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}";
    expect(() => render(doubling)).toThrow(`a string longer than ${MAX_RENDERED_CHARS} characters`);
  });

  it("keeps the interpreter's own errors readable", () => {
    expect(() => render('{{ raise_exception("no title") }}')).toThrow('failed on this event: no title');
    expect(() => render('{{ 1 + none }}')).toThrow('failed on this event');
  });
});
