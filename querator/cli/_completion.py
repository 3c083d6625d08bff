"""``querator completion bash|zsh``: a shell completion script made from the command's own parser, so it
knows every command, action and flag of this version and none that it lacks."""

from __future__ import annotations

import argparse
from typing import Any

SHELLS = ("bash", "zsh")

_SCRIPT = """# querator completion ({shell}): eval "$(querator completion {shell})"
{prelude}_querator() {{
    local cur path word
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    path=""
    for word in "${{COMP_WORDS[@]:1:COMP_CWORD-1}}"; do
        case "$word" in -*) ;; *) _querator_known "$path $word" && path="$path $word" ;; esac
    done
    COMPREPLY=($(compgen -W "$(_querator_words "$path")" -- "$cur"))
}}
_querator_known() {{
    case "$1" in
{known}
        *) return 1 ;;
    esac
}}
_querator_words() {{
    case "$1" in
{words}
    esac
}}
complete -o default -F _querator querator
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description='Print a completion script for bash or zsh: eval "$(querator completion bash)" in '
        "~/.bashrc (zsh: in ~/.zshrc).",
    )
    p.add_argument("shell", choices=SHELLS)


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``parser``'s commands for ``shell``."""
    paths: dict[str, list[str]] = {}
    _walk(parser, "", paths)
    known = "\n".join(f'        "{path}") return 0 ;;' for path in sorted(paths) if path)
    words = "\n".join(f'        "{path}") echo "{" ".join(w)}" ;;' for path, w in sorted(paths.items()))
    prelude = "autoload -U +X bashcompinit && bashcompinit\n" if shell == "zsh" else ""
    return _SCRIPT.format(shell=shell, prelude=prelude, known=known, words=words)


def _walk(parser: argparse.ArgumentParser, path: str, paths: dict[str, list[str]]) -> None:
    """Records, for each command path (" serve", " schedules create"), the words that may follow it."""
    words: list[str] = []
    for action in parser._actions:  # argparse has no public walk of its tree
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                words.append(name)
                _walk(child, f"{path} {name}", paths)
        else:
            words += [flag for flag in action.option_strings if flag.startswith("--")]
    paths[path] = words
