"""The shared frontier on Redis: needs the ``redis`` extra.

Importing any module here without the redis package installed raises a
:class:`~scrapy_frontier.errors.FrontierConfigError` that names the extra to install.
"""

from scrapy_frontier.errors import require_extra

require_extra("redis", "redis", "FRONTIER_BACKEND='redis'")
