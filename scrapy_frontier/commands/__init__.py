"""``scrapy frontier``: look inside a crawl's frontier, and steer it, while it runs.

* :mod:`.frontier` -- the Scrapy command (registered through the ``scrapy.commands``
  entry point): arguments, settings, output;
* :mod:`.inspect_sqlite`, :mod:`.inspect_redis` -- the read side of each backend: they
  open the state read-only and never write to it;
* :mod:`.steer` -- the control writes (block, unblock, delay, retire, budget);
* :mod:`.render` -- the human tables.
"""
