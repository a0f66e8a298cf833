"""The web server: HTTP API v1 and the HTML console (``nsjq web``; extra ``nsj-queue-lib[web]``).

``create_app(WebSettings.from_env(os.environ))`` is the ASGI application;
``main()`` serves it with uvicorn. See docs/web.md.
"""
