"""The benchmark harness as a library: measuring speculative methods in vLLM
engines and servers, with hardware-independent counts beside every time.
The commands that use it are ``python -m benchmarks.X``; nothing here runs
as a command.

- ``methods``: the methods the harness runs and their speculative configs;
- ``specs``: the options engine commands share, draft lengths, cell plans;
- ``prompts``: Spec-Bench, GSM8K or any JSONL of prompts;
- ``engine``: one engine in this process: start, stop, generate, measure;
- ``counters``: vLLM's and the plugin's counters (every metric name read);
- ``records``: ``Measurement``, cell keys, the JSON-lines results files;
- ``context``: versions, machine and arguments kept beside a run;
- ``stats``: means, intervals of ratios and proportions, paired differences;
- ``tables``: how numbers are written in Markdown tables;
- ``report``: the tables of an offline (and served) results folder;
- ``plots``: the plots (matplotlib);
- ``traces``: reading ``VLLM_GAMMATUNE_TRACE`` files;
- ``token_projection``: tokens per second of draft strategies projected from a trace;
- ``paired``: interleaved paired runs: order, complete rounds, summary;
- ``paired_runs``: the offline paired run itself (its options, engines, rounds);
- ``pooling``: the rounds of several paired runs as one set;
- ``serving``: a ``vllm-gammatune serve`` process and vLLM's client;
- ``serve_runs``: the served cells and the interleaved served schedules;
- ``traffic``: a served trace of phases of different load, back to back on one server;
- ``traffic_decisions``: the plugin's decisions per phase, from its trace;
- ``traffic_report``: a traffic run's summary, intervals and page;
- ``traffic_plot``: its plot (matplotlib).

Imports vLLM lazily; nothing here runs at import.
"""
