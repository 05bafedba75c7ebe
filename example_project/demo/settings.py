"""Settings of the scrapy-frontier demo project."""

BOT_NAME = "demo"
SPIDER_MODULES = ["demo.spiders"]
NEWSPIDER_MODULE = "demo.spiders"

# The one line that turns on scrapy-frontier.
ADDONS = {"scrapy_frontier.Addon": 0}

# The demo web lives on loopback and answers in milliseconds, so the 1 s
# default floor would only make the demo slow; on the real web keep it.
FRONTIER_MIN_DELAY = 0.0
FRONTIER_DELAY_FACTOR = 10.0

CONCURRENT_REQUESTS = 16
ROBOTSTXT_OBEY = True
USER_AGENT = "scrapy-frontier-demo (+https://github.com/scrapy-frontier)"
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "INFO"
REMOTE_CONTROL_ENABLED = False
