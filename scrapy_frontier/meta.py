"""Every ``Request.meta`` key scrapy-frontier reads or writes (all ``frontier_*``)."""

#: Set by the scheduler: the lease ticket of a request the frontier handed out.
LEASE_META = "frontier_lease"
#: Set by the scheduler: the request's lease lapsed before it was sent (a shared frontier's
#: fence); it was given back unfetched, and ``enqueue_request`` drops this copy.
LAPSED_META = "frontier_lapsed"
#: Set by the timing middleware on robots.txt requests (they bypass the scheduler,
#: but they are contacts the host's rest must count).
ROBOTS_START_META = "frontier_robots_start"
#: Set by the robots.txt cache middleware on Scrapy's robots.txt requests: the origin
#: (``scheme://netloc``) whose record their final answer is kept as (redirects keep it).
ROBOTS_ORIGIN_META = "frontier_robots_origin"
#: Set with it when the kept record is no longer fresh: the record, which answers in place
#: of a final answer that says the robots.txt is unreachable (RFC 9309).
ROBOTS_STALE_META = "frontier_robots_stale"
#: Set by the scheduler: the request comes from the page history (a due recrawl).
RECRAWL_META = "frontier_recrawl"
#: Set by a spider: recrawl this request although its method is not safe to repeat (POST...).
UNSAFE_META = "frontier_recrawl_unsafe"
#: Set by a spider: fetch even if the page is not due for recrawl (or retired).
FORCE_META = "frontier_force"
#: Set by a spider: an integer added to the request's priority.
BOOST_META = "frontier_priority_boost"
#: Set by Scrapy 2.13+ (``StartSpiderMiddleware``) on start requests.
START_META = "is_start_request"
#: Set by the scheduler: a sitemap or feed the frontier requested itself (FRONTIER_SITEMAPS);
#: its response is read for change claims and not passed to the spider.
SITEMAP_META = "frontier_sitemap"
