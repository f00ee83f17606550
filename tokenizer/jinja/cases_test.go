package jinja

import "strings"

// featureCase is one micro-test: a template and its context (a JSON
// object), rendered by Go and by jinja2.
type featureCase struct {
	name, tmpl, ctx string
}

// featureCases cover every construct chat templates use; each is checked
// against jinja2 (byte-identical output, or both fail).
var featureCases = []featureCase{
	// printing
	{"print none bool", "{{ none }} {{ true }} {{ False }} {{ None }}", ""},
	{"print ints floats", "{{ 1 }} {{ -7 }} {{ 1.0 }} {{ 2.5 }} {{ 1e16 }} {{ 1.5e-7 }} {{ 0.1 + 0.2 }} {{ 1e15 }} {{ 123456789.125 }}", ""},
	{"print json numbers", "{{ a }} {{ b }} {{ c }} {{ d }}", `{"a": 3, "b": 3.0, "c": 1e100, "d": -0.0}`},
	{"print list", "{{ [1, 'a', none, true, 2.0, [\"x\"], {'k': 'v'}] }}", ""},
	{"print dict order", "{{ d }}", `{"d": {"z": 1, "a": {"y": [1, 2]}, "m": null}}`},
	{"print tuple", "{{ (1,) }} {{ (1, 2) }} {{ () }}", ""},
	{"repr quotes", `{{ ["it's", 'say "hi"', "both ' \"", "tab\there\nnl", "back\\slash", "é\u00a0\u200b"] }}`, ""},
	{"print undefined", "[{{ nope }}][{{ nope is defined }}]", ""},
	// arithmetic
	{"int float arithmetic", "{{ 1 + 2 }} {{ 1 + 2.0 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7.5 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2.0 ** 3 }} {{ 5 - 7.5 }}", ""},
	{"bool arithmetic", "{{ true + 1 }} {{ true * 3 }} {{ -true }}", ""},
	{"string ops", "{{ 'ab' * 3 }} {{ 3 * 'x' }} {{ 'a' + 'b' }} {{ 'a' ~ 1 ~ none ~ true }} {{ [1] + [2] }} {{ [0] * 3 }}", ""},
	{"percent format", "{{ '%s and %d' % ('x', 3) }} {{ '%s' % none }}", ""},
	{"error str plus none", "{{ 'a' + none }}", ""},
	{"error int plus str", "{{ 1 + 'a' }}", ""},
	{"error undefined plus", "{{ x + 1 }}", ""},
	{"error division by zero", "{{ 1 / 0 }}", ""},
	{"error modulo zero", "{{ 1 % 0 }}", ""},
	// comparisons
	{"compare values", "{{ [1, 2] == [1, 2] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ none == none }} {{ (1, 2) == [1, 2] }}", ""},
	{"compare error", "{{ 1 < 'a' }}", ""},
	{"in operator", "{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 'x' in nope }}", ""},
	{"in error", "{{ 1 in 'abc' }}", ""},
	// logic
	{"and or not", "{{ 1 and 2 }} {{ 0 and 2 }} {{ 0 or 'x' }} {{ '' or [] }} {{ not [] }} {{ not nope is defined }}", ""},
	{"conditional expr", "{{ 'y' if 1 else 'n' }} {{ 'y' if 0 else 'n' }} [{{ 'y' if 0 }}]", ""},
	// strings
	{"slicing", "{{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ [1,2,3,4][::2] }} {{ [1,2,3][-1] }} {{ 'héllo'[1] }} {{ 'abc'[5:] }} {{ [1,2,3,4,5][-2:0:-1] }} {{ 'abcdef'[:-2] }}", ""},
	{"code points", "{{ 'naïve 日本'|length }} {{ '日本語'[1] }} {{ '😀x'[-1] }} {{ '😀x'|list }}", ""},
	{"index out of range", "[{{ [1][5] }}][{{ 'a'[3] }}]", ""},
	{"string methods", "{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  x '.lstrip() }}|{{ ' x  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'Hello World'.upper() }}|{{ 'Hello'.lower() }}|{{ 'hello wORLD'.title() }}|{{ 'x{}y{}'.format(1, 'z') }}|{{ '{a}-{0}'.format(5, a='k') }}", ""},
	{"split last", "{{ 'a</think>b</think>c'.split('</think>')[-1] }} {{ 'abc'.split('</think>')[0] }}", ""},
	{"dict methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.keys() }}{{ d.values() }}{{ d.get('a') }}{{ d.get('zz') }}{{ d.get('zz', 5) }}", `{"d": {"b": 1, "a": [2]}}`},
	{"dict attr vs item", "{{ d.items is defined }} {{ d['items'] }} {{ d.name }} {{ d['name'] }}", `{"d": {"items": "I", "name": "N"}}`},
	// filters
	{"tojson", "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ 'é<>&\"\\n'|tojson }}|{{ [1.0, none, true]|tojson }}|{{ {}|tojson(indent=4) }}|{{ []|tojson }}", `{"d": {"z": [1, {"y": "ü"}], "a": null, "n": 1.5}}`},
	{"tojson indent nested", "{{ x|tojson(indent=4) }}", `{"x": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}, "required": []}}}]}`},
	{"tojson undefined", "{{ nope|tojson }}", ""},
	{"trim length join", "{{ '  a '|trim }}|{{ 'xax'|trim('x') }}|{{ [1,2]|length }}|{{ 'ab'|length }}|{{ {'a':1}|length }}|{{ nope|length }}|{{ [1,'a',none]|join(', ') }}|{{ 'abc'|join('-') }}|{{ users|join(',', attribute='n') }}", `{"users": [{"n": "a"}, {"n": "b"}]}`},
	{"items dictsort", "{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}|{% for k, v in d|dictsort %}{{ k }}{{ v }}{% endfor %}|{{ d|dictsort(reverse=true) }}|{{ d|dictsort(by='value') }}", `{"d": {"b": 2, "C": 3, "a": 1}}`},
	{"selectattr rejectattr", "{{ ms|selectattr('role', 'equalto', 'user')|list }}|{{ ms|rejectattr('role', 'equalto', 'user')|map(attribute='content')|list }}|{{ ms|selectattr('x')|list|length }}|{{ ms|selectattr('x', 'defined')|list }}", `{"ms": [{"role": "user", "content": "a"}, {"role": "system", "content": "b", "x": 1}, {"role": "user", "content": "c", "x": 0}]}`},
	{"generator truthy", "{{ 'yes' if ms|selectattr('role', 'equalto', 'nobody') else 'no' }} {{ (ms|selectattr('role', 'equalto', 'nobody')|list)|length }}", `{"ms": [{"role": "user"}]}`},
	{"generator length error", "{{ ms|selectattr('role')|length }}", `{"ms": [{"role": "user"}]}`},
	{"map", "{{ ms|map(attribute='n')|join }} {{ ['a ', ' b']|map('trim')|list }} {{ ms|map(attribute='q', default='z')|list }} {{ ['1','2']|map('int')|sum }}", `{"ms": [{"n": "x"}, {"n": "y"}]}`},
	{"select reject", "{{ [0, 1, '', 'a', none]|select|list }} {{ [1,2,3,4]|reject('odd')|list }}", ""},
	{"list string", "{{ 'ab'|list }} {{ {'a': 1}|list }} {{ [1, none]|string }} {{ none|string }} {{ 1.0|string }}", ""},
	{"default", "{{ nope|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|default('d') }} {{ nope|d('x') }}", ""},
	{"first last", "{{ [1,2,3]|first }} {{ [1,2,3]|last }} {{ 'abc'|first }} {{ 'abc'|last }} [{{ []|first }}]", ""},
	{"int float", "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '1.5'|float }} {{ 2|float }} {{ 'q'|float }} {{ true|int }}", ""},
	{"case filters", "{{ 'hELLO wORLD'|lower }} {{ 'abc'|upper }} {{ 'hELLO wORLD'|capitalize }} {{ 'hello-world foo(bar)'|title }} {{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 1) }}", ""},
	{"more filters", "{{ -3|abs }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ [3,1,2]|sort }} {{ ['b','A','c']|sort }} {{ [1,2,1]|unique|list }} {{ [1,2,3]|reverse|list }} {{ 'abc'|reverse }} {{ [1,2,3]|sum }} {{ 'a\nb\n\nc'|indent(2) }}", ""},
	// tests
	{"tests", "{{ x is defined }} {{ nope is undefined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is sequence }} {{ 'a' is sequence }} {{ {} is sequence }} {{ 1 is sequence }} {{ nope is iterable }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is integer }} {{ true is boolean }} {{ 1 is boolean }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 2 is in [1, 2] }} {{ 'a' is equalto 'a' }} {{ 3 is odd }} {{ 4 is even }} {{ 6 is divisibleby 3 }} {{ x is not none }}", `{"x": 1}`},
	// statements
	{"if elif else", "{% for i in [1, 2, 3] %}{% if i == 1 %}one{% elif i == 2 %}two{% else %}other{% endif %}{% endfor %}", ""},
	{"for loop vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]{{ loop.cycle('o', 'e') }} {% endfor %}", ""},
	{"for else filter", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}|{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}|{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}", ""},
	{"for over none", "{% for x in none %}{% endfor %}", ""},
	{"for unpack error", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", ""},
	{"break continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", ""},
	{"range", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }}", ""},
	{"set scoping", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 10 %}{{ x }} {% endfor %}{{ x }}{% if true %}{% set x = 5 %}{% endif %}{{ x }}", ""},
	{"set in loop reads outer", "{% set y = 'out' %}{% for i in [1, 2] %}{% if i == 2 %}{{ y }}{% endif %}{% set y = i %}{% endfor %}{{ y }}", ""},
	{"namespace", "{% set ns = namespace(found=false, n=0) %}{% for i in [1, 2, 3] %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.found }} {{ ns.n }}", ""},
	{"namespace set error", "{% set x = 1 %}{% set x.a = 2 %}", ""},
	{"set block", "{% set s %}a{{ 1 + 1 }}b{% endset %}[{{ s }}]{% set t | upper %}x{% endset %}{{ t }}", ""},
	{"tuple set", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}", ""},
	{"macro", "{% macro m(a, b='d', c=none) %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}{{ m() }}", ""},
	{"macro too many args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", ""},
	{"macro recursion", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}", ""},
	{"macro runaway recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", ""},
	{"macro sees globals", "{% set g = 'G' %}{% macro m() %}{{ g }}{{ x }}{% endmacro %}{{ m() }}", `{"x": "X"}`},
	{"call block", "{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}", ""},
	{"filter block", "{% filter upper %}abc{{ 'd' }}{% endfilter %}", ""},
	{"with", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", ""},
	{"raise_exception", "{{ raise_exception('bad template') }}", ""},
	{"strftime_now", "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %j %p %I') }}", ""},
	{"recursive loop", "{% for n in tree recursive %}{{ n.v }}{% if n.c %}({{ loop(n.c) }}){% endif %}{% endfor %}", `{"tree": [{"v": 1, "c": [{"v": 2, "c": []}, {"v": 3}]}, {"v": 4}]}`},
	{"loop changed", "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}", ""},
	{"unknown filter", "{{ 1|nosuchfilter }}", ""},
	{"unknown tag", "{% nosuchtag %}", ""},
	{"syntax error", "{{ 1 + }}", ""},
	{"unclosed block", "{% if true %}x", ""},
	// whitespace
	{"whitespace control", "a  {{- 'b' -}}  c\n  {%- if true -%}  d  {%- endif -%}\n e {# c -#}  f", ""},
	{"trim lstrip blocks", "<ul>\n    {% for i in [1, 2] %}\n    <li>{{ i }}</li>\n    {% endfor %}\n</ul>\n", ""},
	{"lstrip plus", "x\n    {%+ if true %}y{% endif %}\n  {# comment #}\nz", ""},
	{"trailing newline dropped once", "a\n\n", ""},
	{"crlf source", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc", ""},
	{"raw", "{% raw %}{{ not evaluated }}{% endraw %}|{%- raw -%} x {%- endraw -%}|", ""},
	{"comment lstrip", "a\n  {# note #}\nb", ""},
	{"string escapes", `{{ 'a\nb\tc\\d\'e\x41\u00e9' }} {{ "q\"q" }} {{ 'con' 'cat' }}`, ""},
	// sandbox
	{"sandbox dunder", "{{ ''.__class__ }}|{{ x.__class__.__mro__ }}", `{"x": 1}`},
	{"sandbox mutate list", "{% set l = [1] %}{{ l.append(2) }}", ""},
	{"sandbox mutate dict", "{% set d = {} %}{{ d.update({'a': 1}) }}", ""},
	{"sandbox pop", "{{ d.pop('a') }}", `{"d": {"a": 1}}`},
	{"undefined attribute error", "{{ nope.attr }}", ""},
	{"undefined call error", "{{ nope() }}", ""},
	{"none attribute", "[{{ n.attr }}][{{ n['x'] }}]", `{"n": null}`},
	{"not callable", "{{ 1() }}", ""},
	{"unhashable", "{{ {[1]: 2} }}", ""},
	// more Python details
	{"float repr edge", "{{ 1e300 * 1e300 }} {{ -0.0 }} {{ 0.1 }} {{ 1 / 3 }} {{ 100.0 }} {{ 1e-4 }} {{ 1e-5 }} {{ 12345678901234567.0 }} {{ 2.0 ** 0.5 }} {{ 1e22 }} {{ 5e-324 }}", ""},
	{"printf more", "{{ '%d' % 3.7 }} {{ '%s' % [1, 2] }} {{ '%r' % 'a' }} {{ '100%%' % () }}", ""},
	{"split empty sep", "{{ 'abc'.split('') }}", ""},
	{"int keys", "{{ {1: 'a', 2: 'b'}[1] }} {{ {1: 'a'} }} {{ {true: 'x'}[1] }} {{ {(1, 2): 'x'} }}", ""},
	{"items tuples", "{{ {'a': 1}|items|list }} {{ ('a', 1) }} {{ {'a': 1}.items()|list }} {{ d|dictsort|first }}", `{"d": {"b": 1, "a": 2}}`},
	{"pow left assoc", "{{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 10 // 3 * 2 }} {{ not true == false }} {{ 1 if true else 2 if false else 3 }}", ""},
	{"concat precedence", "{{ 'a' ~ 'b' + 'c' }}", ""},
	{"concat precedence error", "{{ 1 ~ 2 + 3 }}", ""},
	{"trailing commas literals", "{{ {'a': 1,} }} {{ [1,] }} {{ (1, 2,) }}", ""},
	{"method kwargs", "{{ 'a-b-c'.split('-', maxsplit=1) }} {{ ''.join(['a', 'b']) }} {{ d.get('a', 'dflt') }} {{ d.get('x', 'dflt') }}", `{"d": {"a": null}}`},
	{"sort attribute", "{{ [3, 1]|sort(reverse=true) }} {{ us|sort(attribute='age')|map(attribute='n')|join }} {{ [1, 2, 3]|select('>', 1)|list }} {{ [1, 2, 3]|select('gt', 1)|list }}", `{"us": [{"n": "a", "age": 30}, {"n": "b", "age": 20}]}`},
	{"int filter edge", "{{ 1.5|int }} {{ -1.5|int }} {{ ' 7 '|int }} {{ '1_000'|int }} {{ 3|string + 'x' }} {{ '  '|trim|length }}", ""},
	{"tests more", "{{ 'abc' is upper }} {{ 'ABC' is upper }} {{ none is sameas none }} {{ ns is mapping }} {{ 3 is gt 2 }} {{ 1 is ne 2 }}", ""},
	{"loop depth nested", "{% for x in [1, 2] %}{% for y in [3, 4] %}{{ loop.depth }}{{ loop.index }}{{ x }}{{ y }} {% endfor %}{{ loop.index }}{% endfor %}", ""},
	{"namespace print", "{% set ns = namespace() %}{% set ns.x = 1 %}{{ ns.x }} {{ namespace(a=1).a }} {{ dict(a=1, b=2) }} {{ namespace({'k': 2}).k }}", ""},
	{"macro default refers param", "{% macro m(a, b=a) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, 2) }}", ""},
	{"undefined printing", "{{ nope == none }} [{{ nope|string }}] {{ nope ~ 'x' }} [{{ 'x' if nope }}] {{ [nope] }} {{ {'a': nope} }} {{ nope|default }}", ""},
	{"undefined attr in if", "{% if nope.attr %}x{% endif %}", ""},
	{"join default", "{{ [1, 2]|join }} {{ 'ab'|first|upper }} {{ [[1], [2]]|join(',') }}", ""},
	{"string index item", "[{{ m.content[0]['text'] }}] [{{ m.content[0] }}]", `{"m": {"content": "abc"}}`},
	{"whitespace mixes", "a  \n  {%- if true %}\n\tb\n{%- endif %}  \n c {{- '\n  d  ' -}} \n e\n\t{% if true %}f{% endif %}\n{#- x -#}\n g {{ \"{{\" }} {# {{ x }} #}h", ""},
	{"lstrip tabs and set", "x\n\t \t{% set a = 1 -%}\n   text\n  {%- set b = 2 %}\n{{ a }}{{ b }}", ""},
	{"raw trim", "a\n{% raw -%}\n  {{ x }}\n  {%- endraw %}\nb", ""},
	{"else in for with break", "{% for i in [1, 2] %}{% if i == 1 %}{% break %}{% endif %}{% else %}E{% endfor %}{% for i in [1, 2] %}{% if i == 2 %}{% break %}{% endif %}{% else %}F{% endfor %}{% for i in [1, 2] %}{% continue %}{% else %}G{% endfor %}|{% for i in [] if i %}{% else %}E2{% endfor %}", ""},
	{"loop in macro in loop", "{% macro m(xs) %}{% for x in xs %}{{ loop.index }}{{ x }}{% endfor %}{% endmacro %}{% for y in ['ab', 'c'] %}{{ m(y) }}|{% endfor %}", ""},
	{"set inside macro local", "{% set x = 'g' %}{% macro m() %}{% set x = 'l' %}{{ x }}{% endmacro %}{{ m() }}{{ x }}", ""},
	{"set inside if in loop", "{% for i in [1, 2] %}{% if i == 1 %}{% set t = 'one' %}{% endif %}[{{ t }}]{% endfor %}[{{ t }}]", ""},
	{"messages slice reassign", "{% set messages = messages[1:] %}{{ messages|length }}{% for m in messages %}{{ m }}{% endfor %}", `{"messages": ["s", "u", "a"]}`},
	{"tojson unicode escapes", "{{ '\\u2028 \\x7f \\x00 \\u00e9 😀'|tojson }} {{ '😀é'|tojson(ensure_ascii=true) }}", ""},
	{"tojson float and big", "{{ [1.0, 0.1, 1e20, 1e16, 123456789012345678]|tojson }}", ""},
	{"round and abs", "{{ 2.675|round(2) }} {{ 0.5|round }} {{ 0.125|round(2) }} {{ 1.5|round }} {{ range(3) }} {{ range(1, 5, 2) }} {{ 3|round }} {{ 2.1|round(0, 'ceil') }} {{ -2.5|abs }}", ""},
	{"capitalize title unicode", "{{ 'élan VITAL'|capitalize }} {{ 'élan vital-x'|title }} {{ 'ÉLAN'|lower }} {{ 'straße'.upper() }}", ""},
	// real template idioms
	{"messages idiom", "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}", `{"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true}`},
	{"reverse index loop", "{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}{{ index }}{%- endfor %}", `{"messages": [1, 2, 3]}`},
	{"string concat in ns", "{% set ns = namespace(s='') %}{% for m in ['a', 'b'] %}{% set ns.s = ns.s + m %}{% endfor %}{{ ns.s }}", ""},
	{"is string on content list", "{% for c in m.content %}{% if c.type == 'text' %}{{ c.text }}{% endif %}{% endfor %}{{ m.content is string }}", `{"m": {"content": [{"type": "text", "text": "T"}]}}`},
}

// limitCases must fail with ErrLimit (jinja2 would run out of memory or
// time on them).
var limitCases = []string{
	"{{ [] * 2 ** 62 }}{{ [1] * 2 ** 40 }}",
	"{{ 'ab' * 2 ** 40 }}",
	"{% for i in range(2 ** 40) %}{% endfor %}",
	"{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(1) }}",
	"{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
	"{% for a in range(2000) %}{% for b in range(2000) %}{% endfor %}{% endfor %}",
	"{{ " + strings.Repeat("(", 500) + "1" + strings.Repeat(")", 500) + " }}",
	strings.Repeat("{% if 1 %}", 500) + strings.Repeat("{% endif %}", 500),
	"{{ 2 ** 64 }}",
}

// shareCases build values that share parts and print exponentially long.
var shareCases = []string{
	"{% set y = [1] %}" + strings.Repeat("{% set y = [y, y] %}", 60) + "{{ y }}",
	"{% set y = [1] %}" + strings.Repeat("{% set y = [y, y] %}", 60) + "{{ y|tojson }}",
	"{% set y = [1] %}" + strings.Repeat("{% set y = [y, y] %}", 60) + "{{ y == y }}{{ y ~ '' }}",
}
