/*
 * test_template.c: the template language on its own, through graft_template_*.
 *
 * - render_cases: every construct (text and whitespace control, if / for with loop.* /
 *   for-else / loop filters / unpacking / break / continue, set and block set, namespace,
 *   macros, call blocks with caller arguments, filter blocks, raw, comments), the
 *   expression language, printing (Python's str and repr), every filter, test, method and
 *   global. Each expected text was produced by Python's jinja2 in the oracle's setup
 *   (tests/template_oracle.py, strftime_now at 2026-01-01 00:00 UTC) when the case was
 *   written.
 * - jinja2_errors: inputs on which jinja2 raises; graft must fail too.
 * - Syntax errors and runtime errors carry the line and column; raise_exception gives its
 *   message; the limits (steps, macro depth, output size, memory, nesting) stop runaway
 *   templates; every allocation failure during parse and render (of a small template and of
 *   Qwen3's real one) is a clean GRAFT_ENOMEM without leaks; a 50000-key input dict is
 *   looked up, sorted and dumped in linear time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "graft.h"
#include "util/util.h"

typedef struct render_case {
    const char *tmpl, *vars, *want;
} render_case;

typedef struct error_case {
    const char *tmpl, *vars;
} error_case;

#define VARS "{\"xs\": [3, 1, 2], \"d\": {\"b\": 2, \"a\": 1}, \"s\": \"Hello World\", \"n\": null, \"msgs\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}, {\"role\": \"user\", \"content\": \"bye\"}]}"
static const render_case render_cases[] = {
    {"plain text",
     "{}",
     "plain text"},
    {"{{ 1 }} {{ 1.0 }} {{ -2.5 }} {{ 1e16 }} {{ 1.5e-7 }} {{ 0.1 + 0.2 }}",
     "{}",
     "1 1.0 -2.5 1e+16 1.5e-07 0.30000000000000004"},
    {"{{ none }} {{ true }} {{ False }} {{ n }} [{{ undefined_name }}]",
     VARS,
     "None True False None []"},
    {"{{ [1, 'a', none, true, 2.0] }} {{ {'k': 'v', 'n': [1]} }} {{ (1,) }} {{ (1, 'x') }} {{ () }}",
     "{}",
     "[1, 'a', None, True, 2.0] {'k': 'v', 'n': [1]} (1,) (1, 'x') ()"},
    {"{{ 'it\\'s' }} {{ ['it\\'s', \"say \\\"hi\\\"\", 'both \\' \"', 'tab\\tnl\\n\\\\'] }}",
     "{}",
     "it's [\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\tnl\\n\\\\']"},
    {"{{ '\\x41\\u00e9\\U0001F600\\101\\q' }}",
     "{}",
     "A\303\251\360\237\230\200A\\q"},
    {"{{ 'a' 'b' \"c\" }}",
     "{}",
     "abc"},
    {"a\n  {% if true %}\n  b\n  {% endif %}\nc\n",
     "{}",
     "a\n  b\nc"},
    {"a  {%- if true -%}  b  {%- endif -%}  c",
     "{}",
     "abc"},
    {"a\n  {%+ if true %}b{% endif +%}\nc",
     "{}",
     "a\n  b\nc"},
    {"x {{- ' y ' -}} z",
     "{}",
     "x y z"},
    {"a\n  {# comment #}\nb {#- trimmed -#} c",
     "{}",
     "a\nbc"},
    {"{% raw %}{{ not parsed }}{% endraw %}",
     "{}",
     "{{ not parsed }}"},
    {"line1\r\nline2\rline3\n",
     "{}",
     "line1\nline2\nline3"},
    {"{% if n %}a{% elif xs %}b{% else %}c{% endif %}",
     VARS,
     "b"},
    {"{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}:{{ x }};{% endfor %}",
     VARS,
     "1032TrueFalse3:3;2121FalseFalse3:1;3210FalseTrue3:2;"},
    {"{% for x in xs %}{{ loop.previtem }}/{{ loop.nextitem }} {% endfor %}",
     VARS,
     "/1 3/2 1/ "},
    {"{% for x in xs %}{{ loop.cycle('a', 'b') }}{{ loop.changed(x > 1) }}{% endfor %}",
     VARS,
     "aTruebTrueaTrue"},
    {"{% for x in [] %}no{% else %}empty{% endfor %}",
     "{}",
     "empty"},
    {"{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% endfor %}",
     VARS,
     "3222"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
     VARS,
     "b=2,a=1,ba"},
    {"{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     VARS,
     "3"},
    {"{% for c in 'h\303\251llo' %}[{{ c }}]{% endfor %}",
     "{}",
     "[h][\303\251][l][l][o]"},
    {"{% set a = 1 %}{% for x in xs %}{% set a = x %}{% endfor %}{{ a }}",
     VARS,
     "1"},
    {"{% set ns = namespace(total=0, seen=[]) %}{% for x in xs %}{% set ns.total = ns.total + x %}{% endfor %}{{ ns.total }}",
     VARS,
     "6"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (3, 4) %}{% set c, e = t %}{{ c }}{{ e }}",
     "{}",
     "1234"},
    {"{% set block %}  Some Text  {% endset %}[{{ block }}]{% set up | upper | trim %} shout {% endset %}[{{ up }}]",
     "{}",
     "[  Some Text  ][SHOUT]"},
    {"{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bo', greeting='Hi') }} {{ greet(name='Cy') }}",
     "{}",
     "Hello, Ann! Hi, Bo! Hello, Cy!"},
    {"{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * fact(k - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}",
     "{}",
     "120"},
    {"{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold{% endcall %}",
     "{}",
     "<b>bold</b>"},
    {"{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(item) each([1, 2]) %}<{{ item }}>{% endcall %}",
     "{}",
     "<1><2>"},
    {"{% filter upper %}shout {{ s }}{% endfilter %}",
     VARS,
     "SHOUT HELLO WORLD"},
    {"{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ 1 + 2 * 3 - 4 }}",
     "{}",
     "3 -4 1 2 3.5 1024 0.5 3.0 3"},
    {"{{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1] + [2] }} {{ 'a' ~ 1 ~ none ~ true }}",
     "{}",
     "ababab [1, 1] [1, 2] a1NoneTrue"},
    {"{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1.0 }} {{ 'b' in 'abc' }} {{ 2 not in xs }} {{ 'a' in d }}",
     VARS,
     "True False True True False True"},
    {"{{ n or 'default' }} {{ s and 'yes' }} {{ 0 or [] }} {{ not n }}",
     VARS,
     "default yes [] True"},
    {"{{ 'yes' if xs else 'no' }} [{{ 'x' if n }}] {{ 'a' if false else 'b' if true else 'c' }}",
     VARS,
     "yes [] b"},
    {"{{ s[0] }}{{ s[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ s[:5] }}{{ xs[1:] }}{{ xs[::2] }}{{ s[100:] }}",
     VARS,
     "HdeldlroW olleHHello[1, 2][3, 2]"},
    {"{{ msgs[0].role }} {{ msgs[0]['content'] }} {{ msgs[-1].content }} {{ d.a }} {{ d['b'] }} {{ xs.1 }}",
     VARS,
     "user hi bye 1 2 1"},
    {"{{ -xs[0] }} {{ +1 }} {{ -3|abs }}",
     VARS,
     "-3 1 3"},
    {"{{ '  x  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ s|length }}|{{ xs|count }}|{{ s|upper }}|{{ s|lower }}|{{ 'hello wORLD'|capitalize }}|{{ 'hello wORLD-foo (bar'|title }}",
     VARS,
     "x|hi|11|3|HELLO WORLD|hello world|Hello world|Hello World-Foo (Bar"},
    {"{{ s|replace('o', '0') }} {{ s|replace('o', '0', 1) }} {{ xs|join(', ') }} {{ msgs|join('|', attribute='role') }}",
     VARS,
     "Hell0 W0rld Hell0 World 3, 1, 2 user|assistant|user"},
    {"{{ undefined_name|default('dflt') }} {{ ''|default('empty', true) }} {{ n|default('x') }} {{ undefined_name|d('d') }}",
     VARS,
     "dflt empty None d"},
    {"{{ xs|first }} {{ xs|last }} {{ 'abc'|list }} {{ d|list }} {{ d|items|list }} {{ xs|sort }} {{ xs|sort(reverse=true) }}",
     VARS,
     "3 2 ['a', 'b', 'c'] ['b', 'a'] [('b', 2), ('a', 1)] [1, 2, 3] [3, 2, 1]"},
    {"{{ ['b', 'A', 'a', 'C']|sort }} {{ ['b', 'A', 'a', 'C']|sort(case_sensitive=true) }} {{ msgs|sort(attribute='role')|map(attribute='content')|join }}",
     VARS,
     "['A', 'a', 'b', 'C'] ['A', 'C', 'a', 'b'] yohibye"},
    {"{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ msgs|rejectattr('role', 'eq', 'user')|list|length }}",
     VARS,
     "['hi', 'bye'] 1"},
    {"{{ xs|select('odd')|list }} {{ xs|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }} {{ ['a', 'b']|map('upper')|list }}",
     VARS,
     "[3, 1] [2] [1, 'a'] ['A', 'B']"},
    {"{{ msgs|map(attribute='missing', default='?')|list }} {{ xs|unique|list }} {{ ['a', 'A', 'b']|unique|list }} {{ d|dictsort }} {{ d|dictsort(reverse=true) }}",
     VARS,
     "['?', '?', '?'] [3, 1, 2] ['a', 'b'] [('a', 1), ('b', 2)] [('b', 2), ('a', 1)]"},
    {"{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 'y'|float }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3|round }} {{ 2.1|round(0, 'ceil') }}",
     "{}",
     "42 4 0 7 3 2.5 0.0 2.57 2.0 3 3.0"},
    {"{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('> ', blank=true) }}",
     "{}",
     "a\n  b\n\n  c|  a\n  b|a\n> \n> b"},
    {"{{ '<a href=\"x\">&</a>'|e }} {{ ('<b>'|safe) + '<i>' }} {{ xs|sum }} {{ xs|min }} {{ xs|max }} {{ xs|reverse|list }} {{ 'abc'|reverse }}",
     VARS,
     "&lt;a href=&#34;x&#34;&gt;&amp;&lt;/a&gt; <b>&lt;i&gt; 6 1 3 [2, 1, 3] cba"},
    {"{{ d|tojson }} {{ msgs[0]|tojson(indent=2) }} {{ {'b': 1, 'a': [1.5, none, true]}|tojson(sort_keys=true) }} {{ '\303\251\"\\n'|tojson }} {{ '\303\251'|tojson(ensure_ascii=true) }} {{ d|tojson(separators=(',', ':')) }}",
     VARS,
     "{\"b\": 2, \"a\": 1} {\n  \"role\": \"user\",\n  \"content\": \"hi\"\n} {\"a\": [1.5, null, true], \"b\": 1} \"\303\251\\\"\\n\" \"\\u00e9\" {\"b\":2,\"a\":1}"},
    {"{{ xs|string }} {{ 12|string }} {{ msgs[0]|attr('role') }}|{{ s|attr('upper') is callable }}",
     VARS,
     "[3, 1, 2] 12 |True"},
    {"{{ n is none }} {{ xs is defined }} {{ nope is undefined }} {{ s is string }} {{ 1 is number }} {{ true is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is boolean }} {{ d is mapping }}",
     VARS,
     "True True True True True True True True True True"},
    {"{{ xs is iterable }} {{ s is iterable }} {{ 1 is iterable }} {{ nope is iterable }} {{ xs is sequence }} {{ d is sequence }} {{ false is false }} {{ true is true }} {{ 1 is true }}",
     VARS,
     "True True False True True True True True False"},
    {"{{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 1 is eq 1 }} {{ 1 is equalto(2) }} {{ 2 is gt 1 }} {{ 2 is lt 1 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 1 is ne 2 }}",
     "{}",
     "True True True False True True True False True False True False True"},
    {"{{ 2 is in xs }} {{ 'x' is in 'xyz' }} {{ none is sameas none }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ s is not string }}",
     VARS,
     "True True True True True False"},
    {"{{ '  a b  '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}",
     "{}",
     "a b|axx|xxa|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['a,b', 'c']"},
    {"{{ s.startswith('He') }} {{ s.endswith(('x', 'ld')) }} {{ s.replace('l', 'L') }} {{ s.upper() }} {{ s.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ s.find('o') }} {{ s.rfind('o') }} {{ s.count('l') }} {{ '-'.join(['a', 'b']) }}",
     VARS,
     "True True HeLLo WorLd HELLO WORLD hello world Hello World Hello 4 7 3 a-b"},
    {"{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 0) }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ xs.index(2) }} {{ xs.count(3) }} {{ 'a\\nb'.splitlines() }} {{ '12'.isdigit() }}",
     VARS,
     "1 None 0 ['b', 'a'] [2, 1] [('b', 2), ('a', 1)] 2 1 ['a', 'b'] True"},
    {"{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }} {{ dict(a=1)|tojson }} {{ strftime_now('%Y-%m-%d %H:%M') }}",
     "{}",
     "[0, 1, 2] [1, 3, 5] [3, 2, 1] {\"a\": 1} 2026-01-01 00:00"},
    {"[{{ nope }}][{{ nope|length }}][{{ nope|list }}][{% for x in nope %}x{% endfor %}][{{ nope ~ 'a' }}][{{ msgs[0].nope }}][{{ n.attr }}]",
     VARS,
     "[][0][[]][][a][][]"},
    {"abc {% if true %}x{% endif %}\n  y",
     VARS,
     "abc x  y"},
    {"  {%- if true -%}   \n  a\n  {%- endif %}\nb",
     VARS,
     "ab"},
    {"a -%}{{ 'x' -}}\343\200\200\343\200\200b",
     VARS,
     "a -%}xb"},
    {"{% for k, v in d|dictsort %}{{ loop.changed(v) }}{% endfor %}",
     VARS,
     "TrueTrue"},
    {"{{ xs|map('string')|join('-') }}",
     VARS,
     "3-1-2"},
    {"{{ msgs|selectattr('role')|list|length }}{{ msgs|map(attribute='role')|first }}",
     VARS,
     "3user"},
    {"{% set x = 5 %}{% macro m() %}{{ x }}{% set x = 6 %}{{ x }}{% endmacro %}{{ m() }}{{ x }}",
     VARS,
     "565"},
    {"{% for a in [1] %}{% for b in [2] %}{{ loop.index }}{{ a }}{% endfor %}{% endfor %}",
     VARS,
     "11"},
    {"{{ [1,2,3][1:-1] }}{{ 'abc'[5] }}|{{ xs[10] }}|",
     VARS,
     "[2]||"},
    {"{{ none|string }}{{ true|tojson }}{{ none|tojson }}{{ 1.0|tojson }}{{ 1e16|tojson }}{{ [1.5e-7]|tojson }}",
     VARS,
     "Nonetruenull1.01e+16[1.5e-07]"},
    {"{{ 'a\\u2028b'|tojson }}{{ '\\x7f'|tojson }}{{ '\\x7f'|tojson(ensure_ascii=true) }}{{ '\360\237\230\200'|tojson(ensure_ascii=true) }}",
     VARS,
     "\"a\342\200\250b\"\"\177\"\"\\u007f\"\"\\ud83d\\ude00\""},
    {"{{ {'a': 1}|tojson(indent='\\t') }}{{ [[], {}]|tojson(indent=0) }}",
     VARS,
     "{\n\t\"a\": 1\n}[\n[],\n{}\n]"},
    {"{{ {1: 'x', true: 'y', none: 'z'}|tojson }}",
     VARS,
     "{\"1\": \"y\", \"null\": \"z\"}"},
    {"{{ 'x'|indent(first=true) }}|{{ ''|indent }}|{{ 'a\\n'|indent }}|",
     VARS,
     "    x||a\n|"},
    {"{{ '  a  '|trim('') }}|{{ 'aXbXc'|replace('X', '') }}|{{ 'abc'|replace('', '-') }}",
     VARS,
     "  a  |abc|-a-b-c-"},
    {"{{ 'hello'|capitalize }} {{ \"they're bill's friends\"|title }} {{ \"they're\".title() }}",
     VARS,
     "Hello They're Bill's Friends They'Re"},
    {"{{ 1 if 0 else 2 if 0 }}|",
     VARS,
     "|"},
    {"{{ 'a' ~ [1] ~ {'b': none} ~ (1, 2) }}",
     VARS,
     "a[1]{'b': None}(1, 2)"},
    {"{% set t = (1,) %}{{ t + (2,) }}{{ t * 2 }}{{ t == [1] }}",
     VARS,
     "(1, 2)(1, 1)False"},
    {"{{ 'abc' < 'abd' }}{{ [1, 2] < [1, 3] }}{{ none == none }}{{ n is none }}",
     VARS,
     "TrueTrueTrueTrue"},
    {"{{ xs|sum(start=10) }}{{ [0.1, 0.2]|sum }}",
     VARS,
     "160.30000000000000004"},
    {"{{ 2.675|round(2) }}{{ 0.5|round }}{{ 1.5|round }}{{ -0.5|round }}{{ 2|round(1) }}",
     VARS,
     "2.670.02.0-0.02"},
    {"{{ 'x' * 0 }}|{{ 'ab' * -1 }}|{{ 3 * 'c' }}",
     VARS,
     "||ccc"},
    {"{{ '%'|e }}{{ \"<'\\\">\"|escape }}",
     VARS,
     "%&lt;&#39;&#34;&gt;"},
    {"{% filter trim %}   x   {% endfilter %}|{% set b | trim %}  y  {% endset %}{{ b }}",
     VARS,
     "x|y"},
    {"{{ strftime_now('%A %d %B %Y %I:%M %p %j') }}",
     VARS,
     "Thursday 01 January 2026 12:00 AM 001"},
    {"{% for i in range(3) %}{{ i }}{% else %}none{% endfor %}{% for i in range(0) %}{% else %}empty{% endfor %}",
     VARS,
     "012empty"},
    {"{{ msgs[0] }}{{ msgs[0].items()|list }}",
     VARS,
     "{'role': 'user', 'content': 'hi'}[('role', 'user'), ('content', 'hi')]"},
    {"{{ xs.append }}|{{ d.update }}|{{ d.pop }}|",
     VARS,
     "|||"},
    {"{{ namespace(a=1) }}",
     VARS,
     "<Namespace {'a': 1}>"},
    {"{{ 'a' in msgs[0] }}{{ 'role' in msgs[0] }}{{ 1 in xs }}{{ none in xs }}",
     VARS,
     "FalseTrueTrueFalse"},
    {"{% if true %}\na\n{% endif %}\nb",
     VARS,
     "a\nb"},
    {"\t{% if true %}\tx\n\t{% endif %}",
     VARS,
     "\tx\n"},
    {"{# c #}\nx\n  {# c2 #}  y",
     VARS,
     "x\n  y"},
    {"{{ 'a' }}\n  {% if true %}b{% endif %}",
     VARS,
     "a\nb"},
    {"x{% raw %}\n  {{ y }}\n{% endraw %}\nz",
     VARS,
     "x\n  {{ y }}\nz"},
    {"x  {%- raw -%}  {{ y }}  {%- endraw -%}  z",
     VARS,
     "x{{ y }}z"},
    {"{%- for x in xs -%}\n  {{ x }}\n{%- endfor %}",
     VARS,
     "312"},
    {"{% for x in xs %}\n  {{ x }}\n{% endfor %}",
     VARS,
     "  3\n  1\n  2\n"},
    {"{{ \"multi\nline\" }}",
     VARS,
     "multi\nline"},
    {"{%+ if true %}  keep{% endif %}\n  {%+ if true %}kept{% endif %}",
     VARS,
     "  keep  kept"},
    {"{% if true +%}\nx{% endif %}",
     VARS,
     "\nx"},
    {"{{ {'a': {'b': 1}} }}",
     VARS,
     "{'a': {'b': 1}}"},
    {"{{ {'a': {'b': 1}}['a']['b'] }}",
     VARS,
     "1"},
    {"{% set x = {'k': [1, {'z': 2}]} %}{{ x.k[1].z }}{{ x['k'][0] }}",
     VARS,
     "21"},
    {"{{ 'a' if true }}{{ 'b' if false }}|",
     VARS,
     "a|"},
    {"{{ -2 ** 2 }}{{ (-2) ** 2 }}{{ 2 ** 3 ** 2 }}",
     VARS,
     "4464"},
    {"{{ 1 < 2 == true }}",
     VARS,
     "False"},
    {"{{ xs | length > 2 }}{{ not xs|length }}",
     VARS,
     "TrueFalse"},
    {"{{ 'x' is string and 1 is number }}{{ n is not none or 'e' }}",
     VARS,
     "Truee"},
    {"{{ '\\\\' }}{{ \"\\\\n\" }}{{ '\\'' }}{{ \"\\\"\" }}{{ 'a\\\nb' }}",
     VARS,
     "\\\\n'\"ab"},
    {"{{ 1_000 }}{{ 1.5e3 }}{{ 2E2 }}{{ 0.5 }}",
     VARS,
     "10001500.0200.00.5"},
    {"{{ xs.0 }}{{ msgs.1.role }}",
     VARS,
     "3assistant"},
    {"{% macro m(a, b=2) -%}\n{{ a }}-{{ b }}\n{%- endmacro %}\n[{{ m(1) }}]",
     VARS,
     "[1-2]"},
    {"{%- set ns = namespace(x=1) -%}\n{%- set ns.x = ns.x + 1 -%}\n{{ ns.x }}",
     VARS,
     "2"},
    {"{% for m in msgs %}{% set last = m %}{% endfor %}{{ last is defined }}",
     VARS,
     "False"},
    {"{% if true %}{% set y = 1 %}{% endif %}{{ y }}",
     VARS,
     "1"},
    {"{{ msgs|rejectattr('role', 'in', ['user'])|map(attribute='content')|list }}",
     VARS,
     "['yo']"},
    {"{{ msgs|selectattr('content', 'string')|list|length }}{{ msgs|selectattr('role', 'ne', 'user')|first }}",
     VARS,
     "3{'role': 'assistant', 'content': 'yo'}"},
    {"{{ [{'a': 2}, {'a': 1}]|sort(attribute='a') }}{{ ['b', 'a']|sort|join }}",
     VARS,
     "[{'a': 1}, {'a': 2}]ab"},
    {"{{ [1, 2, 1]|unique|list }}{{ xs|max }}{{ ['B', 'a']|max }}{{ ['B', 'a']|min(case_sensitive=true) }}",
     VARS,
     "[1, 2]3BB"},
    {"{{ 'x'|default }}{{ undefined_x|default }}|{{ none|default('d') }}{{ none|default('d', true) }}",
     VARS,
     "x|Noned"},
    {"{{ 42|string|length }}{{ 4.0|int }}{{ '0x10'|int }}{{ ' 12 '|int }}{{ '1_000'|int }}{{ true|int }}",
     VARS,
     "2401210001"},
    {"{{ [1,2,3]|last }}{{ 'abc'|first }}{{ {}|first }}|{{ []|last }}|",
     VARS,
     "3a||"},
    {"{{ msgs[0]|dictsort }}{{ {'B': 1, 'a': 2}|dictsort }}{{ {'b': 1, 'a': 2}|dictsort(by='value') }}",
     VARS,
     "[('content', 'hi'), ('role', 'user')][('a', 2), ('B', 1)][('b', 1), ('a', 2)]"},
    {"{{ 'a b'.split(' ') }}{{ ''.split() }}{{ ''.split(',') }}{{ 'a  b'.split(' ') }}{{ '  x y  z '.split(None, 1) }}{{ '  x y  z '.rsplit(None, 1) }}",
     VARS,
     "['a', 'b'][]['']['a', '', 'b']['x', 'y  z ']['  x y', 'z']"},
    {"{{ 'abc'.startswith('') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.find('z') }}{{ 'aaa'.count('aa') }}{{ 'h\303\251llo'.find('l') }}",
     VARS,
     "TrueTrue-112"},
    {"{{ '  x\\n'.rstrip() }}|{{ '\\t x'.lstrip() }}|{{ 'xyx'.strip('x') }}|{{ '  '.strip() }}|",
     VARS,
     "  x|x|y||"},
    {"{{ d.get('a', 5) }}{{ d.get('zz') }}{{ d.items()|list|length }}",
     VARS,
     "1None2"},
    {"{{ 'abc' ~ 1.0 ~ none }}{{ [none, true] }}{{ [1.0, 1e100, -1e-10] }}",
     VARS,
     "abc1.0None[None, True][1.0, 1e+100, -1e-10]"},
    {"{{ 'ab'|list|tojson }}{{ (1, 2)|tojson }}{{ 'a'|tojson(indent=2) }}",
     VARS,
     "[\"a\", \"b\"][1, 2]\"a\""},
    {"{{ {'b': [1, {'c': 2}], 'a': []}|tojson(indent=2, sort_keys=true) }}",
     VARS,
     "{\n  \"a\": [],\n  \"b\": [\n    1,\n    {\n      \"c\": 2\n    }\n  ]\n}"},
    {"{{ \"a\\\"b\"|safe ~ 'c' }}{{ ('<'|safe + '>') }}{{ ('<' + '>'|safe) }}",
     VARS,
     "a\"bc<&gt;&lt;>"},
    {"{{ xs|reverse|first }}{{ xs|list|reverse|join }}",
     VARS,
     "2213"},
    {"{% for x in xs %}{{ loop.revindex }}{% if loop.last %}!{% endif %}{% endfor %}",
     VARS,
     "321!"},
    {"{% for x, y in [(1, 2), [3, 4]] %}{{ x }}{{ y }}{% endfor %}",
     VARS,
     "1234"},
    {"{% for c in 'ab' %}{% for d in 'xy' %}{{ c }}{{ d }}{% endfor %}{% endfor %}",
     VARS,
     "axaybxby"},
    {"{% set a = [1] %}{% set b = a + [2] %}{{ a }}{{ b }}",
     VARS,
     "[1][1, 2]"},
    {"{{ 1 if xs|selectattr('x') else 2 }}{{ 1 if [] else 2 }}\n",
     VARS,
     "12"},
    {"{% filter upper %}{% set y = 1 %}{% endfilter %}[{{ y }}]",
     VARS,
     "[]"},
    {"{% set b %}{% set z = 1 %}{% endset %}[{{ z }}]",
     VARS,
     "[]"},
    {"{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}{% set w = 1 %}{{ w }}{% endcall %}[{{ w }}]",
     VARS,
     "1[]"},
    {"{% set x = 1 %}{% macro m() %}{% set x = 2 %}{{ x }}{% endmacro %}{{ m() }}{{ x }}",
     VARS,
     "21"},
    {"{% for i in [1, 2] %}{% set ns = namespace(v=i) %}{{ ns.v }}{% endfor %}",
     VARS,
     "12"},
    {"{% set ns = namespace(v=0) %}{% macro inc() %}{% set ns.v = ns.v + 1 %}{% endmacro %}{{ inc() }}{{ inc() }}{{ ns.v }}",
     VARS,
     "2"},
    {"{% macro outer() %}{% macro inner() %}in{% endmacro %}{{ inner() }}{% endmacro %}{{ outer() }}",
     VARS,
     "in"},
    {"{% for x in [1] %}{% macro m() %}{{ x }}{% endmacro %}{{ m() }}{% endfor %}",
     VARS,
     "1"},
    {"{% if true %}{% macro m() %}ok{% endmacro %}{% endif %}{{ m() }}",
     VARS,
     "ok"},
    {"{% macro m(a, b) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}",
     VARS,
     "1"},
    {"{% set x = 1 %}{% for i in [1] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
     VARS,
     "121"},
    {"{% for i in [1, 2] %}{% if loop.first %}{% set first = i %}{% endif %}[{{ first }}]{% endfor %}\n",
     VARS,
     "[1][]"},
    {"{{ msgs | selectattr(\"role\", \"equalto\", \"user\") | list | length }}",
     VARS,
     "2"},
    {"{{ '[INST] ' + msgs[0]['content'] | trim + ' [/INST]' }}",
     VARS,
     "[INST] hi [/INST]"},
    {"{%- if not n is none %}a{% else %}b{% endif %}",
     VARS,
     "b"},
    {"{{ (msgs|selectattr('role', 'equalto', 'user')|list|last).content|trim }}",
     VARS,
     "bye"},
    {"{% for m in msgs %}{{ loop.index0 is even }}{{- \"\\n\\n\" if not loop.last }}{% endfor %}",
     VARS,
     "True\n\nFalse\n\nTrue"},
    {"{%- set c = msgs[0]['content'] if msgs[0]['content'] is string else msgs[0]['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('\\n') %}{{ c }}",
     VARS,
     "hi"},
    {"{% set parts = [{'type': 'text', 'text': 'a'}, {'type': 'image'}, {'type': 'text', 'text': 'b'}] %}{{ parts | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('\\n') }}",
     VARS,
     "a\nb"},
    {"{{ msgs[0].content|length > 0 and msgs[1].content|length > 0 }}",
     VARS,
     "True"},
    {"{{ xs | map('string') | map('upper') | list }}{{ msgs | map(attribute='role') | unique | list }}",
     VARS,
     "['3', '1', '2']['user', 'assistant']"},
    {"{% for m in msgs %}{% if m.role == 'user' %}{{ '<|user|>\\n' + m.content + '<|end|>\\n' }}{% elif m.role == 'assistant' %}{{ '<|assistant|>\\n' + m.content + '<|end|>\\n' }}{% endif %}{% endfor %}",
     VARS,
     "<|user|>\nhi<|end|>\n<|assistant|>\nyo<|end|>\n<|user|>\nbye<|end|>\n"},
    {"{{ 'a' if xs|length is divisibleby 3 }}{{ 4 is divisibleby(2) }}",
     VARS,
     "aTrue"},
    {"{{ msgs|length - 1 }}{{ (msgs|length - 1) * 2 }}{{ msgs|length // 2 }}",
     VARS,
     "241"},
    {"{{ d.a is defined }}{{ d.zz is defined }}{{ d['zz'] is not defined }}{{ msgs[5] is defined }}",
     VARS,
     "TrueFalseTrueFalse"},
    {"{{ 10|string + 'x' }}{{ (1, 2)|join('-') }}{{ d|length }}",
     VARS,
     "10x1-22"},
    {"{% set x = namespace(items=[]) %}{% set x.items = x.items + ['a'] %}{{ x.items }}",
     VARS,
     "['a']"},
    {"{%- for m in msgs -%}\n    {%- if loop.first and m.role != 'system' -%}\n        {{- 'SYS\\n' -}}\n    {%- endif -%}\n    {{- m.role | upper }}: {{ m.content }}\n{% endfor -%}",
     VARS,
     "SYS\nUSER: hi\nASSISTANT: yo\nUSER: bye\n"},
    {"{%- macro fmt(x) -%}\n  {%- if x is mapping -%}\n    {%- for k, v in x.items() -%}{{ k }}={{ fmt(v) }}{% if not loop.last %},{% endif %}{%- endfor -%}\n  {%- elif x is iterable and x is not string -%}\n    [{{ x|map('string')|join(';') }}]\n  {%- else -%}\n    {{ x }}\n  {%- endif -%}\n{%- endmacro -%}\n{{ fmt({'a': [1, 2], 'b': {'c': 'd'}}) }}\n",
     VARS,
     "a=[1;2],b=c=d"},
    {"{{ xs[::9223372036854775807] }}{{ xs[::-9223372036854775807] }}{{ 'abc'[::-2] }}{{ 'abcdef'[1:5:2] }}{{ 'abcdef'[5:1:-2] }}{{ xs[-100:100] }}{{ xs[2:0] }}",
     VARS,
     "[3][2]cabdfd[3, 1, 2][]"},
    {"{{ range(9223372036854775806, 9223372036854775807, 2)|list }}{{ range(-5, 5, 3)|list }}{{ range(5, -5, -3)|list }}{{ range(0)|list }}{{ range(3, 3)|list }}",
     VARS,
     "[9223372036854775806][-5, -2, 1, 4][5, 2, -1, -4][][]"},
    {"{{ msgs|map(attribute='0')|list }}{{ [[1, 2], [3]]|map(attribute='1')|list }}\n",
     VARS,
     "[Undefined, Undefined, Undefined][2, Undefined]"},
};
static const error_case jinja2_errors[] = {
    {"{{ nope.attr }}", "{}"}, /* UndefinedError: 'nope' is undefined */
    {"{{ nope + 1 }}", "{}"}, /* UndefinedError: 'nope' is undefined */
    {"{{ 'a' + 1 }}", "{}"}, /* TypeError: can only concatenate str (not "int") to str */
    {"{{ xs.append(4) }}", VARS}, /* SecurityError: access to attribute 'append' of 'list' object */
    {"{{ raise_exception('custom failure') }}", "{}"}, /* RaisedByTemplate: custom failure */
    {"{{ 1 / 0 }}", "{}"}, /* ZeroDivisionError: division by zero */
    {"{{ n|length }}", VARS}, /* TypeError: object of type 'NoneType' has no len() */
    {"{{ 'x' in none }}", "{}"}, /* TypeError: argument of type 'NoneType' is not iterable */
    {"{{ xs|map('upper')|length }}", VARS}, /* TypeError: object of type 'generator' has no len() */
    {"{{ 1 < 'a' }}", "{}"}, /* TypeError: '<' not supported between instances of 'int' and  */
    {"{{ nope() }}", "{}"}, /* UndefinedError: 'nope' is undefined */
    {"{% for a, b in xs %}{% endfor %}", VARS}, /* TypeError: cannot unpack non-iterable int object */
    {"{{ range(1000000)|length }}", "{}"}, /* OverflowError: Range too big. The sandbox blocks ranges larg */
};

#define FIXED_NOW 1767225600 /* 2026-01-01 00:00:00 UTC */

/* Parses and renders; returns the status, with the text or the message in *text (free). */
static int render_opts(const char *tmpl, const char *vars, const graft_template_options *opts,
                       char **text)
{
    graft_template *t = NULL;
    char *err = NULL, *out = NULL;
    int rc = graft_template_parse(tmpl, strlen(tmpl), &t, &err);
    if (rc == GRAFT_OK) {
        rc = graft_template_render(t, vars, strlen(vars), opts, &out, NULL, &err);
        graft_template_free(t);
    }
    *text = rc == GRAFT_OK ? out : err;
    if (rc == GRAFT_OK)
        graft_free(err);
    return rc;
}

static int render(const char *tmpl, const char *vars, char **text)
{
    graft_template_options opts = {0};
    opts.now = FIXED_NOW;
    return render_opts(tmpl, vars, &opts, text);
}

static void test_render_cases(void **state)
{
    (void)state;
    int failed = 0;
    for (size_t i = 0; i < sizeof render_cases / sizeof render_cases[0]; i++) {
        const render_case *c = &render_cases[i];
        char *text = NULL;
        int rc = render(c->tmpl, c->vars, &text);
        if (rc != GRAFT_OK || strcmp(text, c->want) != 0) {
            printf("case %zu: %s\n  want: [%s]\n  got (%s): [%s]\n", i, c->tmpl, c->want,
                   graft_status_str(rc), text ? text : "");
            failed++;
        }
        graft_free(text);
    }
    assert_int_equal(failed, 0);
}

static void test_jinja2_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof jinja2_errors / sizeof jinja2_errors[0]; i++) {
        char *text = NULL;
        int rc = render(jinja2_errors[i].tmpl, jinja2_errors[i].vars, &text);
        if (rc == GRAFT_OK)
            fail_msg("%s renders (%s) where jinja2 raises", jinja2_errors[i].tmpl, text);
        assert_non_null(text);
        assert_non_null(strstr(text, "line 1, column "));
        graft_free(text);
    }
}

/* The status and message of a failing render. */
static void expect_error(const char *tmpl, const char *vars, int status, const char *message)
{
    char *text = NULL;
    int rc = render(tmpl, vars, &text);
    if (rc != status || text == NULL || strstr(text, message) == NULL)
        fail_msg("%s: want %s with '%s', got %s: %s", tmpl, graft_status_str(status), message,
                 graft_status_str(rc), text ? text : "(no message)");
    graft_free(text);
}

static void test_syntax_errors(void **state)
{
    (void)state;
    expect_error("ab\n{{ x ", "{}", GRAFT_EFORMAT, "line 2, column 1: ");
    expect_error("{% if x %}\nno end", "{}", GRAFT_EFORMAT, "line 1, column 4: ");
    expect_error("{% if x %}\nno end", "{}", GRAFT_EFORMAT, "expected 'endif'");
    expect_error("\n\n  {{ x|nosuchfilter }}", "{}", GRAFT_EFORMAT,
                 "line 3, column 8: TemplateSyntaxError: no filter named 'nosuchfilter'");
    expect_error("{{ x is nosuchtest }}", "{}", GRAFT_EFORMAT, "no test named 'nosuchtest'");
    expect_error("x\n{% frobnicate %}", "{}", GRAFT_EFORMAT,
                 "line 2, column 4: TemplateSyntaxError: encountered unknown tag 'frobnicate'");
    expect_error("{% include 'x' %}", "{}", GRAFT_EFORMAT, "'include' tag is not supported");
    expect_error("{# never closed", "{}", GRAFT_EFORMAT, "line 1, column 1: ");
    expect_error("{{ 'unterminated }}", "{}", GRAFT_EFORMAT, "unterminated string");
    expect_error("{{ (1 + 2 }}", "{}", GRAFT_EFORMAT, "line 1, column ");
    expect_error("{{ [1, 2) }}", "{}", GRAFT_EFORMAT, "unexpected ')'");
    expect_error("{% break %}", "{}", GRAFT_EFORMAT, "'break' outside of a for loop");
    expect_error("{% for x in y recursive %}{% endfor %}", "{}", GRAFT_EFORMAT,
                 "recursive for loops are not supported");
    expect_error("{% endif %}", "{}", GRAFT_EFORMAT, "unknown tag 'endif'");
    expect_error("{{ }}", "{}", GRAFT_EFORMAT, "line 1, column 4: ");
    /* Nesting and elif chains beyond 200 levels. */
    char deep[8192] = "";
    for (int i = 0; i < 300; i++)
        strcat(deep, "{% if x %}");
    expect_error(deep, "{}", GRAFT_EFORMAT, "nested too deeply");
    strcpy(deep, "{% if x %}");
    for (int i = 0; i < 300; i++)
        strcat(deep, "{% elif x %}");
    strcat(deep, "{% endif %}");
    expect_error(deep, "{}", GRAFT_EFORMAT, "nested too deeply");
    strcpy(deep, "{{ ");
    for (int i = 0; i < 300; i++)
        strcat(deep, "(");
    expect_error(deep, "{}", GRAFT_EFORMAT, "nested too deeply");
}

static void test_runtime_errors(void **state)
{
    (void)state;
    expect_error("a\n  {{ raise_exception('Roles must alternate') }}", "{}", GRAFT_EINVAL,
                 "line 2, column 6: Roles must alternate");
    expect_error("\n{{ m.content + 1 }}", "{\"m\": {\"content\": \"x\"}}", GRAFT_EINVAL,
                 "line 2, column 14: TypeError: can only concatenate str (not \"int\") to str");
    expect_error("{{ nope.attr }}", "{}", GRAFT_EINVAL, "UndefinedError: 'nope' is undefined");
    expect_error("{{ xs.append(1) }}", "{\"xs\": []}", GRAFT_EINVAL, "SecurityError");
    expect_error("{{ x }}", "[1, 2]", GRAFT_EINVAL, "input: the JSON must be an object");
    expect_error("{{ x }}", "{\"x\": ", GRAFT_EINVAL, "input: line 1");
    expect_error("{% set x = 1 %}{% set x.a = 2 %}", "{}", GRAFT_EINVAL, "non-namespace");
    expect_error("{{ 9223372036854775807 + 1 }}", "{}", GRAFT_ERANGE, "OverflowError");
    expect_error("{{ range(200000) }}", "{}", GRAFT_ERANGE, "Range too big");
    expect_error("{{ 1e300|int }}", "{}", GRAFT_ERANGE, "OverflowError");
    expect_error("{{ '%s' % 1 }}", "{}", GRAFT_EUNSUPPORTED, "printf-style");
    expect_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "{}", GRAFT_EINVAL,
                 "takes not more than 1 argument");
    expect_error("{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", "{}", GRAFT_EINVAL,
                 "no keyword argument 'b'");
}

static void test_limits(void **state)
{
    (void)state;
    expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                 "{}", GRAFT_ECAPACITY, "line 1, column 32: template: more than 1000000 steps");
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", GRAFT_ECAPACITY,
                 "macro calls nested more than 100 deep");
    expect_error("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}"
                 "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}",
                 "{}", GRAFT_ECAPACITY, "template: ");
    /* Scans inside loops count too: 100000 x 100000 comparisons would take minutes. */
    expect_error("{% set big = range(100000)|list %}{% for i in range(100000) %}"
                 "{{ 'x' if -1 in big }}{% endfor %}",
                 "{}", GRAFT_ECAPACITY, "more than 1000000 steps");
    expect_error("{% set a = range(100000)|list %}{% for i in range(100000) %}{{ a == a }}"
                 "{% endfor %}",
                 "{}", GRAFT_ECAPACITY, "more than 1000000 steps");
    expect_error("{{ range(100000)|list|unique|list|length }}{{ range(100000)|unique|list }}", "{}",
                 GRAFT_ECAPACITY, "more than 1000000 steps");
    expect_error("{% set s = 'a' * 1000000 %}{{ s.rfind('a' * 500000 ~ 'b') }}", "{}",
                 GRAFT_ECAPACITY, "more than 1000000 steps");
    char *text0 = NULL; /* a huge count of nothing is nothing, at once */
    assert_int_equal(render("{{ 8 ** 2 ** 7 * [] + [2] }}{{ '' * 9000000000000 }}|", "{}", &text0),
                     GRAFT_OK);
    assert_string_equal(text0, "[2]|");
    graft_free(text0);
    expect_error("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns }}", "{}", GRAFT_EINVAL,
                 "nested too deeply");
    /* A left-nested chain as long as a hostile template likes: an error, not a crash. */
    size_t n = 200000;
    char *chain = malloc(n * 2 + 16);
    assert_non_null(chain);
    strcpy(chain, "{{ 1");
    for (size_t i = 0; i < n; i++)
        strcat(chain + 4 + 2 * i, "+1");
    strcat(chain + 4 + 2 * n, " }}");
    expect_error(chain, "{}", GRAFT_ECAPACITY, "expressions nested more than 1000 deep");
    free(chain);
    graft_template_options small = {0};
    small.max_output = 1000;
    small.max_steps = 50;
    small.max_depth = 3;
    small.max_memory = 1 << 20;
    char *text = NULL;
    assert_int_equal(render_opts("{% for i in range(60) %}x{% endfor %}", "{}", &small, &text),
                     GRAFT_ECAPACITY);
    assert_non_null(strstr(text, "more than 50 steps"));
    graft_free(text);
    assert_int_equal(render_opts("{{ 'x' * 2000 }}", "{}", &small, &text), GRAFT_ECAPACITY);
    assert_non_null(strstr(text, "output longer than the limit (1000 bytes)"));
    graft_free(text);
    assert_int_equal(render_opts("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(0) }}", "{}", &small,
                                 &text),
                     GRAFT_ECAPACITY);
    assert_non_null(strstr(text, "nested more than 3 deep"));
    graft_free(text);
    assert_int_equal(render_opts("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}"
                                 "{% set ns.l = ns.l + ns.l + ns.l %}{% endfor %}",
                                 "{}", &small, &text),
                     GRAFT_ECAPACITY);
    graft_free(text);
    /* Within the limits the same template works. */
    assert_int_equal(render_opts("{% for i in range(40) %}x{% endfor %}", "{}", &small, &text),
                     GRAFT_OK);
    assert_int_equal(strlen(text), 40);
    graft_free(text);
}

/* Allocation failures through a real template (Qwen3's, with tools and a tool call) and a
 * parse of it: each one a clean GRAFT_ENOMEM without leaks. */
static void test_allocation_failures_real(void **state)
{
    (void)state;
    const char *dir = graft_test_env("GRAFT_TEMPLATES_DIR");
    const char *src = graft_test_env("GRAFT_SOURCE_DIR");
    char path[2048];
    snprintf(path, sizeof path, "%s/Qwen-Qwen3-0.6B.jinja", dir);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("cannot read %s", path);
    static char tmpl[1 << 16], vars[1 << 16];
    tmpl[fread(tmpl, 1, sizeof tmpl - 1, f)] = '\0';
    fclose(f);
    snprintf(path, sizeof path, "%s/tests/template_corpus/25_tool_call_empty_content.json", src);
    f = fopen(path, "rb");
    assert_non_null(f);
    vars[fread(vars, 1, sizeof vars - 1, f)] = '\0';
    fclose(f);
    char *want = NULL;
    assert_int_equal(render(tmpl, vars, &want), GRAFT_OK);
    long base = graft__alloc_live();
    for (long n = 0;; n++) {
        graft__alloc_fail_after(n, n % 2 == 1); /* transient and persistent in turn */
        char *text = NULL;
        int rc = render(tmpl, vars, &text);
        long failures = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        if (failures == 0) {
            assert_int_equal(rc, GRAFT_OK);
            assert_string_equal(text, want);
            graft_free(text);
            break;
        }
        if (rc != GRAFT_ENOMEM)
            fail_msg("allocation %ld failing: %s (%s)", n, graft_status_str(rc), text ? text : "");
        graft_free(text);
        assert_int_equal(graft__alloc_live(), base);
        assert_true(n < 100000);
    }
    graft_free(want);
}

/* A big input dict (hashed from 16 keys on): every key found, in order, in linear time. */
static void test_big_dict(void **state)
{
    (void)state;
    size_t n = 50000;
    char *json = malloc(n * 24 + 64);
    assert_non_null(json);
    size_t k = (size_t)sprintf(json, "{\"d\": {");
    for (size_t i = 0; i < n; i++)
        k += (size_t)sprintf(json + k, "%s\"k%zu\": %zu", i ? ", " : "", (n - i) * 7, i);
    strcpy(json + k, "}}");
    char *text = NULL;
    uint64_t t0 = graft__now_ns();
    assert_int_equal(render("{% set ns = namespace(bad=0, sum=0) %}{% for key in d %}"
                            "{% if d[key] != loop.index0 %}{% set ns.bad = ns.bad + 1 %}{% endif %}"
                            "{% set ns.sum = ns.sum + d.get(key) %}{% endfor %}"
                            "{{ ns.bad }} {{ ns.sum }} {{ d.k7 }} {{ d['k350000'] }} {{ 'k8' in d }} "
                            "{{ (d|tojson(sort_keys=true))[:20] }} {{ d|dictsort|first }}",
                            json, &text),
                     GRAFT_OK);
    /* (what jinja2 gives for the same input) */
    assert_string_equal(text, "0 1249975000 49999 0 False {\"k100002\": 35714, \" ('k100002', 35714)");
    assert_true(graft__now_ns() - t0 < 5000000000ull);
    graft_free(text);
    free(json);
}

/* ChatML, the default for a model without a template. */
static void test_default_template(void **state)
{
    (void)state;
    char *text = NULL;
    assert_int_equal(render(graft_template_default(),
                            "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
                            "\"add_generation_prompt\": true}",
                            &text),
                     GRAFT_OK);
    assert_string_equal(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    graft_free(text);
    /* a tool-calling assistant turn has null content */
    assert_int_equal(render(graft_template_default(),
                            "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, "
                            "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": []}, "
                            "{\"role\": \"tool\", \"content\": \"42\"}]}",
                            &text),
                     GRAFT_OK);
    assert_string_equal(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                              "<|im_end|>\n<|im_start|>tool\n42<|im_end|>\n");
    graft_free(text);
}

/* Every allocation of a parse and a render failing in turn: a clean GRAFT_ENOMEM, nothing
 * leaked, until the run that has no failure gives the full text. */
static void test_allocation_failures(void **state)
{
    (void)state;
    const char *tmpl = "{% macro m(x) %}<{{ x|upper }}>{% endmacro %}"
                       "{% set ns = namespace(n=0) %}{% for m2 in messages %}"
                       "{% set ns.n = ns.n + 1 %}{{ m(m2.content) }}{{ m2|tojson }}{% endfor %}"
                       "{{ ns.n }}{{ messages|map(attribute='role')|join(',') }}";
    const char *vars = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                       "{\"role\": \"assistant\", \"content\": \"yo\"}]}";
    const char *want = "<HI>{\"role\": \"user\", \"content\": \"hi\"}<YO>{\"role\": "
                       "\"assistant\", \"content\": \"yo\"}2user,assistant";
    long base = graft__alloc_live();
    for (long n = 0;; n++) {
        graft__alloc_fail_after(n, false);
        char *text = NULL;
        int rc = render(tmpl, vars, &text);
        long failures = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        if (failures == 0) {
            assert_int_equal(rc, GRAFT_OK);
            assert_string_equal(text, want);
            graft_free(text);
            assert_int_equal(graft__alloc_live(), base);
            break;
        }
        if (rc != GRAFT_ENOMEM)
            fail_msg("allocation %ld failing: %s (%s)", n, graft_status_str(rc), text ? text : "");
        graft_free(text);
        assert_int_equal(graft__alloc_live(), base);
        assert_true(n < 10000);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_cases),      cmocka_unit_test(test_jinja2_errors),
        cmocka_unit_test(test_syntax_errors),     cmocka_unit_test(test_runtime_errors),
        cmocka_unit_test(test_limits),            cmocka_unit_test(test_default_template),
        cmocka_unit_test(test_allocation_failures), cmocka_unit_test(test_allocation_failures_real),
        cmocka_unit_test(test_big_dict),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
