"""The Scrapy signals scrapy-frontier sends; connect to them with ``crawler.signals.connect``.

(The sitemaps and feeds that sites publish, which the docs call *change signals*, are read in
:mod:`scrapy_frontier.core.signals`.)
"""

#: A recrawl found a page unchanged: the server answered the frontier's conditional request
#: with 304 Not Modified. Sent with ``request`` (the spider's request), ``response`` (the 304)
#: and ``spider``, after the visit is recorded. The page then reaches neither the callback nor
#: the errback, unless ``FRONTIER_RECRAWL_PASS_304`` passes it to the callback.
page_unchanged = object()
