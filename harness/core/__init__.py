"""The floor every other package stands on: no pipeline stage, no engine.

Typed errors (:mod:`.errors`), where things live (:mod:`.paths`), progress and console output
(:mod:`.progress`), reading inputs (:mod:`.inputs`) and data YAML (:mod:`.datafile`), JSON values
(:mod:`.jsonvalue`), optional dependency groups (:mod:`.extras`), the shared dataclasses
(:mod:`.types`), the host probe (:mod:`.host`) and crash notes of child processes (:mod:`.crash`).
"""
