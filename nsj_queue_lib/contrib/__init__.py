"""Integrations with other frameworks, each behind its own extra (``nsj_queue_lib.contrib.django``:
``pip install 'nsj-queue-lib[django]'``). Importing ``nsj_queue_lib`` loads none of them."""
