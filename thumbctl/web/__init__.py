"""The review page over HTTP: ``thumbctl review``'s web application and its server.

Owns the routes and the checks every request passes (:mod:`.app`: token, ``Host``, ``Origin``), the
loopback server (:mod:`.server`, uvicorn) and the page itself (``static/``: HTML, CSS and JavaScript
shipped in the package, no build step and no CDN; ``static/geometry.js`` ports
:mod:`thumbctl.imaging.window`). Needs the ``review`` extra (Starlette, uvicorn).

Imports: the crop review's session (:mod:`thumbctl.cropreview`) and core; nothing else.
"""
