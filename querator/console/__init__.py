"""The web console (docs/console.md): static files served at ``/ui/`` by every node.

The console is a page of plain JavaScript that calls the v1 JSON API from the browser with the user's
API key, so it can do nothing the key could not do over the API (docs/adr/0020-web-console.md).
This package only serves its files: read once from the package directory into memory, so a request can
name nothing but a file that was shipped, and answered with the security headers of ``_files``.
"""

from querator.console._files import CONSOLE_PREFIX, CONTENT_SECURITY_POLICY, ConsoleFiles
from querator.console._routes import add_console

__all__ = ["CONSOLE_PREFIX", "CONTENT_SECURITY_POLICY", "ConsoleFiles", "add_console"]
