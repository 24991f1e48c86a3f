"""Generators of record-like context passages: order records, delivery traces,
account statements, aging reports, tickets, chat transcripts, log snippets,
alerts and incident timelines. All names, numbers and companies are made up;
the seeded RNG makes the output reproducible."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from .questions import CS, EC, FIN, IT


def _ts(rng: random.Random, start: datetime, max_minutes: int) -> datetime:
    return start + timedelta(minutes=rng.randint(1, max_minutes), seconds=rng.randint(0, 59))


def _day(rng: random.Random) -> datetime:
    return datetime(2024, 1, 1) + timedelta(
        days=rng.randint(0, 300), hours=rng.randint(7, 21), minutes=rng.randint(0, 59)
    )


# ======================================================================= e-commerce

PRODUCTS_EN = [
    ("Trailhead 2-person dome tent, 3-season", 129.00),
    ("Insulated water bottle, 750 ml, brushed steel", 24.95),
    ("Wireless earbuds with charging case, black", 59.99),
    ("Cotton crew-neck T-shirt, 3-pack, size M", 29.90),
    ("Cast iron skillet, 26 cm, pre-seasoned", 34.50),
    ("USB-C fast charger 65 W, 2 ports", 32.00),
    ("Memory foam pillow, medium firm", 45.00),
    ("Kids' rain jacket, yellow, 128 cm", 38.00),
    ("Stainless steel pour-over kettle, 1 L", 42.90),
    ("LED desk lamp with dimmer", 27.49),
    ("Yoga mat, 6 mm, non-slip, teal", 22.00),
    ("Robot vacuum filter replacement kit", 18.99),
    ("Men's trail running shoes, size 43, grey", 89.00),
    ("Ceramic dinner plates, set of 6", 49.00),
    ("Bluetooth kitchen scale", 19.95),
    ("Merino wool socks, 2 pairs", 21.00),
]

PRODUCTS_ZH = [
    ("三人帐篷 户外防雨 双层加厚", 399.00),
    ("316不锈钢保温杯 750ml 磨砂黑", 129.00),
    ("无线蓝牙耳机 主动降噪 白色", 299.00),
    ("纯棉短袖T恤 三件装 L码", 89.90),
    ("铸铁平底锅 26cm 无涂层", 159.00),
    ("65W氮化镓快充充电器 双口", 119.00),
    ("记忆棉枕头 中等软硬", 169.00),
    ("儿童雨衣 黄色 130码", 69.00),
    ("手冲咖啡壶 1L 细口", 139.00),
    ("护眼台灯 无级调光", 199.00),
    ("瑜伽垫 加厚6mm 防滑", 79.00),
    ("扫地机器人 滤网配件套装", 59.00),
    ("男款越野跑鞋 42码 灰色", 459.00),
    ("陶瓷餐盘 6件套", 168.00),
    ("电子厨房秤 精准到0.1g", 49.90),
    ("羊毛袜 两双装", 59.00),
]

CITIES_EN = ["Riverton", "Lakeside", "Maple Grove", "Eastport", "Fairview", "Cedar Falls", "Brookfield"]
CITIES_ZH = [
    "杭州市西湖区",
    "成都市高新区",
    "苏州市工业园区",
    "武汉市洪山区",
    "西安市雁塔区",
    "南京市鼓楼区",
    "佛山市南海区",
    "长沙市岳麓区",
]
HUBS_EN = ["regional sort centre", "linehaul hub", "local delivery station", "customs facility", "airport gateway"]
HUBS_ZH = ["转运中心", "分拨中心", "营业部", "集散中心"]


def ec_order_en(rng: random.Random) -> str:
    n = rng.randint(1, 6)
    items = rng.sample(PRODUCTS_EN, n)
    when = _day(rng)
    lines = [
        f"Order #{rng.randint(10**8, 10**9 - 1)} | placed {when:%Y-%m-%d %H:%M} | "
        f"customer ID C-{rng.randint(100000, 999999)}"
    ]
    subtotal = 0.0
    for name, price in items:
        q = rng.choice([1, 1, 1, 2, 3])
        subtotal += q * price
        lines.append(f"  {q} x {name} @ {price:.2f} = {q * price:.2f}")
    disc = round(subtotal * rng.choice([0, 0, 0.1, 0.15]), 2)
    ship = 0.0 if subtotal - disc >= 49 else 4.99
    lines.append(
        f"Subtotal {subtotal:.2f}; discount -{disc:.2f}"
        f"{' (coupon SPRING' + str(rng.randint(10, 30)) + ')' if disc else ''}; "
        f"shipping {ship:.2f}; total {subtotal - disc + ship:.2f}"
    )
    lines.append(
        f"Payment: {rng.choice(['Visa ending 4412', 'PayPal', 'gift card + Mastercard ending 0087', 'store credit'])}"
    )
    status = rng.choice(
        [
            "Shipped in 2 parcels" if n > 1 else "Shipped",
            "Delivered",
            "Processing - awaiting stock",
            "Return requested for 1 item",
            "Cancelled by customer, refund issued",
        ]
    )
    lines.append(f"Ship to: {rng.choice(CITIES_EN)}, standard delivery. Status: {status}.")
    return "\n".join(lines)


def ec_order_zh(rng: random.Random) -> str:
    n = rng.randint(1, 6)
    items = rng.sample(PRODUCTS_ZH, n)
    when = _day(rng)
    lines = [f"订单编号：{rng.randint(10**15, 10**16 - 1)}  下单时间：{when:%Y-%m-%d %H:%M:%S}"]
    total = 0.0
    for name, price in items:
        q = rng.choice([1, 1, 1, 2])
        total += q * price
        lines.append(f"商品：{name}  单价¥{price:.2f}  数量{q}")
    coupon = rng.choice([0, 0, 10, 20, 30])
    ship = 0 if total >= 99 else 8
    lines.append(f"商品总额¥{total:.2f}，店铺券-¥{coupon:.2f}，运费¥{ship:.2f}，实付¥{total - coupon + ship:.2f}")
    lines.append(f"支付方式：{rng.choice(['微信支付', '支付宝', '信用卡分期（3期）', '余额+支付宝'])}")
    lines.append(f"收货地址：{rng.choice(CITIES_ZH)}（已隐藏详细地址）")
    lines.append(
        "订单状态："
        + rng.choice(
            [
                "已发货，拆分为2个包裹" if n > 1 else "已发货",
                "已签收",
                "待发货（预售，预计7天内发货）",
                "售后处理中：退货退款",
                "已取消，退款已原路退回",
            ]
        )
    )
    return "\n".join(lines)


def ec_tracking_en(rng: random.Random) -> str:
    t = _day(rng)
    carrier = rng.choice(["ParcelLine", "SwiftPost", "NorthStar Freight"])
    events = [f"{carrier} tracking {rng.choice('ABCDEFG')}{rng.randint(10**9, 10**10 - 1)}"]
    steps = ["Label created, shipment information sent to carrier", "Picked up from seller warehouse"]
    for _ in range(rng.randint(2, 6)):
        steps.append(f"Arrived at {rng.choice(HUBS_EN)}, {rng.choice(CITIES_EN)}")
        steps.append("Departed facility")
    steps.append(
        rng.choice(
            [
                "Out for delivery",
                "Delivery attempted - no access to building",
                "Delayed - weather conditions",
                "Held at customs - awaiting documents",
            ]
        )
    )
    if rng.random() < 0.5:
        steps.append(
            rng.choice(
                ["Delivered, left at front door", "Delivered to parcel locker 12", "Delivered, signed by reception"]
            )
        )
    for s in steps:
        t = _ts(rng, t, 900)
        events.append(f"{t:%Y-%m-%d %H:%M}  {s}")
    return "\n".join(events)


def ec_tracking_zh(rng: random.Random) -> str:
    t = _day(rng)
    carrier, prefix = rng.choice([("顺丰速运", "SF"), ("中通快递", "ZT"), ("京东物流", "JD"), ("圆通速递", "YT")])
    city = rng.choice(CITIES_ZH)
    src = rng.choice(["广州", "义乌", "东莞", "天津", "嘉兴"])
    lines = [f"{carrier} 运单号 {prefix}{rng.randint(10**11, 10**12 - 1)}"]
    steps = [f"商家已发货，包裹已由{src}仓揽收"]
    for _ in range(rng.randint(2, 5)):
        steps.append(f"快件到达【{rng.choice(['华东', '华南', '华中', '西南', '华北'])}{rng.choice(HUBS_ZH)}】")
        steps.append("快件已发出，下一站正在运输中")
    steps.append(f"快件已到达【{city}营业部】，快递员正在派件")
    steps.append(
        rng.choice(
            [
                "已签收，签收人：本人",
                "已签收，签收人：快递柜",
                "已放至驿站，请凭取件码领取",
                "派送不成功：电话无人接听，明日再次派送",
                "包裹异常：外包装破损，已联系商家处理",
            ]
        )
    )
    for s in steps:
        t = _ts(rng, t, 700)
        lines.append(f"{t:%m-%d %H:%M} {s}")
    return "\n".join(lines)


PRODUCT_SHEETS_EN = [
    (
        "Aurora 14 ultrabook (refurbished, grade A)",
        749,
        [
            "14-inch 2.8K OLED display, 400 nits",
            "8-core processor, 16 GB RAM, 512 GB SSD",
            "Battery health at least 85 %, about 10 hours of video playback",
            "1.2 kg, aluminium chassis",
            "Two USB-C (charging and display), one USB-A, headphone jack",
            "Wi-Fi 6E, Bluetooth 5.3",
            "12-month warranty; 65 W USB-C charger included (generic, certified)",
        ],
    ),
    (
        "BrewMate Pro espresso machine",
        459,
        [
            "15-bar pump with pre-infusion",
            "Built-in conical burr grinder, 30 grind settings",
            "Steam wand for microfoam",
            "2 L removable water tank",
            "Dishwasher-safe drip tray; the portafilter is hand wash only",
            "Auto-off after 20 minutes",
            "Dimensions 32 x 28 x 41 cm",
            "2-year warranty",
        ],
    ),
    (
        "CloudStep women's running shoe",
        129,
        [
            "Engineered mesh upper, breathable",
            "8 mm heel-to-toe drop",
            "Wide toe box; available in standard and wide fit",
            "Recycled foam midsole",
            "Weight 230 g (size 38)",
            "Runs true to size; half sizes available",
            "Machine wash cold, air dry",
        ],
    ),
    (
        "Nimbus robot vacuum S7",
        329,
        [
            "Lidar navigation with room mapping",
            "Suction up to 4000 Pa",
            "Runtime up to 180 minutes on eco mode",
            "Self-emptying dock sold separately",
            "No-go zones in the app",
            "Works with voice assistants",
            "Box contents: robot, charging dock, side brush x2, filter x1",
        ],
    ),
    (
        "HearthWood 3-seat sofa",
        899,
        [
            "Performance velvet, stain resistant, scratch-resistant weave",
            "Removable, machine-washable cushion covers",
            "Solid pine frame, pocket spring seat",
            "W 214 x D 92 x H 84 cm",
            "Assembly: attach legs only (10 minutes)",
            "Delivered by two-person freight team to room of choice",
        ],
    ),
]

PRODUCT_SHEETS_ZH = [
    (
        "轻薄笔记本 14英寸（官方翻新，A级成色）",
        4599,
        [
            "2.8K OLED屏幕，亮度400尼特",
            "八核处理器，16GB内存，512GB固态硬盘",
            "电池健康度不低于85%，视频续航约10小时",
            "整机重量1.2kg，铝合金机身",
            "接口：USB-C×2、USB-A×1、耳机孔",
            "支持Wi-Fi 6E、蓝牙5.3",
            "翻新机享受12个月保修，附65W充电器",
        ],
    ),
    (
        "全自动意式咖啡机",
        2499,
        [
            "15Bar压力萃取，带预浸泡",
            "内置锥形磨豆器，30档研磨粗细",
            "蒸汽棒可打奶泡",
            "2L可拆卸水箱",
            "接水盘可放洗碗机，冲煮手柄需手洗",
            "20分钟无操作自动关机",
            "整机保修2年",
        ],
    ),
    (
        "女款缓震跑鞋",
        699,
        [
            "网面鞋面，透气轻盈",
            "前后掌落差8mm",
            "宽楦设计，脚宽脚背高的跑者可选宽版",
            "再生材料中底",
            "单只重量约230克（38码）",
            "尺码标准，按平时运动鞋尺码购买即可",
            "可冷水机洗，阴干",
        ],
    ),
    (
        "激光导航扫地机器人",
        1299,
        [
            "激光雷达导航，自动分区建图",
            "最大吸力4000Pa",
            "静音模式续航约180分钟",
            "自动集尘座需单独购买",
            "App可设置禁区和虚拟墙",
            "支持语音助手控制",
            "包装清单：主机、充电座、边刷×2、滤网×1",
        ],
    ),
    (
        "科技布三人位沙发",
        3999,
        [
            "科技布面料，防水防污，防猫抓",
            "坐垫套可拆洗",
            "实木框架，独立袋装弹簧坐垫",
            "尺寸：长214×深92×高84厘米",
            "仅需安装沙发脚，约10分钟",
            "送货上门并搬运至指定房间",
        ],
    ),
]


def ec_product_en(rng: random.Random, sheet) -> str:
    title, price, feats = sheet
    return (
        f"{title}\nPrice: {price - 0.01:.2f} (was {price + rng.choice([20, 50, 100]):.2f}); "
        f"rating {rng.choice([4.1, 4.3, 4.5, 4.6, 4.7])} from {rng.randint(120, 5800)} reviews\n"
        + "\n".join(f"- {f}" for f in feats)
        + f"\nIn stock: {rng.choice(['yes, ships in 24 hours', 'only 3 left', 'back in stock in about 2 weeks'])}"
    )


def ec_product_zh(rng: random.Random, sheet) -> str:
    title, price, feats = sheet
    return (
        f"{title}\n到手价：¥{price}（日常价¥{price + rng.choice([100, 200, 300])}），"
        f"好评率{rng.choice([95, 96, 97, 98])}%，累计评价{rng.randint(300, 20000)}条\n"
        + "\n".join(f"· {f}" for f in feats)
        + f"\n库存：{rng.choice(['现货，24小时内发货', '仅剩5件', '预售，付款后15天内发货'])}"
    )


REVIEWS_EN = [
    (4, "Suction is great on hardwood, struggles a bit with thick rugs."),
    (5, "Battery easily lasts for the whole apartment, 90 square metres."),
    (3, "App kept disconnecting from Wi-Fi the first week, fine after a firmware update."),
    (3, "Loud on max mode, but the quiet mode is fine for evenings."),
    (2, "Gets stuck under the sofa every single time. Had to set a no-go zone."),
    (5, "Customer support replaced a broken side brush within 3 days."),
    (5, "Mapping is accurate, it figured out all five rooms on the first run."),
    (3, "Bin is small, I empty it after every run because of the dog hair."),
    (1, "Returned it: it kept falling down the one step into our living room."),
    (5, "Worth the price. Quieter than my old one and picks up cat litter."),
    (2, "Two stars. The charging dock stopped working after 2 months."),
    (3, "Does a decent job but the mopping pad just spreads water around."),
]

REVIEWS_ZH = [
    (4, "吸力很强，木地板很干净，就是厚地毯上有点吃力。"),
    (5, "续航够用，九十平的房子一次扫完还剩一半电。"),
    (3, "刚买回来App老是断连，升级固件以后好了。"),
    (3, "最大档声音比较大，晚上用静音模式还行。"),
    (2, "每次都卡在沙发底下，只好在App里设了禁区。"),
    (5, "边刷坏了联系客服，三天就寄来了新的，售后不错。"),
    (5, "建图很准，第一次就把五个房间分好了。"),
    (3, "尘盒有点小，家里养狗，基本每次扫完都要倒。"),
    (1, "退了，客厅有个台阶它老是掉下去。"),
    (5, "性价比高，比之前那台安静，猫砂也能吸干净。"),
    (2, "差评，充电座用了两个月就坏了。"),
    (3, "扫地还可以，拖地就是把水抹开，没什么用。"),
]


def ec_reviews(rng: random.Random, lang: str) -> str:
    pool = REVIEWS_EN if lang == "en" else REVIEWS_ZH
    picked = rng.sample(pool, rng.randint(4, 9))
    if lang == "en":
        head = f"Customer reviews (most recent first, {len(picked)} shown):"
        return head + "\n" + "\n".join(f"[{stars}/5] {r}" for stars, r in picked)
    head = f"买家评价（按时间排序，共展示{len(picked)}条）："
    return head + "\n" + "\n".join(f"{stars}星：{r}" for stars, r in picked)


# ======================================================================= finance

# (description, sign, low, high)
MERCHANTS_EN = [
    ("GROCERY MART #221", -1, 12, 160),
    ("FUEL STOP 88", -1, 25, 90),
    ("PAYROLL ACME LOGISTICS", 1, 3100, 4800),
    ("STREAMFLIX SUBSCRIPTION", -1, 15.99, 15.99),
    ("CITY WATER UTILITY", -1, 38, 95),
    ("ATM WITHDRAWAL", -1, 20, 300),
    ("TRANSFER FROM SAVINGS", 1, 200, 1500),
    ("CAFE LUMEN", -1, 3.5, 18),
    ("ONLINE MKTPLACE*8812", -1, 9, 240),
    ("REFUND ONLINE MKTPLACE", 1, 9, 120),
    ("INSURANCE PREMIUM", -1, 84.2, 84.2),
    ("PHARMACY PLUS", -1, 6, 60),
    ("FOREIGN TXN FEE", -1, 0.3, 7),
    ("INTEREST PAID", 1, 0.2, 4.5),
    ("RENT - STANDING ORDER", -1, 1450, 1450),
    ("MOBILE PHONE PLAN", -1, 35, 35),
]
MERCHANTS_ZH = [
    ("超市消费 好邻居便利店", -1, 8, 260),
    ("工资 代发", 1, 8000, 16000),
    ("加油 中石化某加油站", -1, 200, 450),
    ("视频会员 自动续费", -1, 25, 25),
    ("水电燃气 缴费", -1, 60, 320),
    ("ATM取款", -1, 100, 2000),
    ("转账 来自本人储蓄账户", 1, 500, 5000),
    ("餐饮 某咖啡店", -1, 18, 45),
    ("网购 某电商平台", -1, 19, 899),
    ("退款 某电商平台", 1, 19, 399),
    ("保险 保费扣款", -1, 326, 326),
    ("药店 医保个人账户外支付", -1, 12, 180),
    ("利息结算", 1, 0.5, 12),
    ("房租 定期转账", -1, 3200, 3200),
    ("话费充值", -1, 50, 100),
    ("信用卡还款", -1, 800, 6000),
]


def fin_statement(rng: random.Random, lang: str) -> str:
    pool = MERCHANTS_EN if lang == "en" else MERCHANTS_ZH
    start = _day(rng).replace(day=1, hour=0, minute=0)
    bal = round(rng.uniform(2500, 12000), 2)
    rows = []
    d = start
    for _ in range(rng.randint(5, 22)):
        d += timedelta(days=rng.randint(0, 3))
        name, sign, low, high = rng.choice(pool)
        amt = round(rng.uniform(low, high), 2)
        if sign < 0 and amt > bal:  # no overdraft: the account has no credit line
            continue
        bal = round(bal + sign * amt, 2)
        rows.append((d, name, sign * amt, bal))
    if lang == "en":
        out = [
            f"Account statement, checking account ending {rng.randint(1000, 9999)}, "
            f"period {start:%Y-%m-%d} to {d:%Y-%m-%d}",
            "Date        Description                      Amount      Balance",
        ]
        out += [f"{r[0]:%Y-%m-%d}  {r[1]:<32} {r[2]:>10.2f} {r[3]:>11.2f}" for r in rows]
    else:
        out = [
            f"活期账户对账单（尾号{rng.randint(1000, 9999)}），账单周期 {start:%Y-%m-%d} 至 {d:%Y-%m-%d}",
            "交易日期 | 摘要 | 金额 | 余额",
        ]
        out += [f"{r[0]:%Y-%m-%d} | {r[1]} | {r[2]:+.2f} | {r[3]:.2f}" for r in rows]
    return "\n".join(out)


VENDORS_EN = [
    "Northwind Office Supply",
    "Bluepeak Logistics",
    "Harbor Print Co.",
    "Kestrel IT Services",
    "Greenleaf Catering",
    "Summit Facility Management",
    "Orbit Cloud Hosting",
    "Lumen Legal LLP",
]
VENDORS_ZH = [
    "华信办公用品有限公司",
    "远航物流有限公司",
    "蓝海印务有限公司",
    "启明信息技术有限公司",
    "绿源餐饮管理有限公司",
    "恒安物业服务有限公司",
    "云帆科技有限公司",
    "正和律师事务所",
]


def fin_aging(rng: random.Random, lang: str) -> str:
    vendors = VENDORS_EN if lang == "en" else VENDORS_ZH
    asof = _day(rng)
    rows = []
    for _ in range(rng.randint(4, 16)):
        due = asof - timedelta(days=rng.randint(-20, 130))
        amt = round(rng.uniform(180, 48000), 2)
        rows.append((rng.choice(vendors), f"INV-{rng.randint(10000, 99999)}", due, amt, max(0, (asof - due).days)))
    rows.sort(key=lambda r: -r[4])
    if lang == "en":
        out = [
            f"Accounts payable aging as of {asof:%Y-%m-%d} (open items)",
            "Vendor | Invoice | Due date | Amount | Days overdue",
        ]
        out += [f"{v} | {i} | {d:%Y-%m-%d} | {a:,.2f} | {o}" for v, i, d, a, o in rows]
        out.append(
            f"Total open: {sum(r[3] for r in rows):,.2f}; over 60 days: {sum(r[3] for r in rows if r[4] > 60):,.2f}"
        )
    else:
        out = [
            f"应付账款账龄明细（截至{asof:%Y年%m月%d日}，未付清）",
            "供应商 | 发票号 | 到期日 | 金额（元） | 逾期天数",
        ]
        out += [f"{v} | {i} | {d:%Y-%m-%d} | {a:,.2f} | {o}" for v, i, d, a, o in rows]
        out.append(
            f"合计：{sum(r[3] for r in rows):,.2f}元，其中逾期60天以上：{sum(r[3] for r in rows if r[4] > 60):,.2f}元"
        )
    return "\n".join(out)


def fin_expense(rng: random.Random, lang: str) -> str:
    d0 = _day(rng)
    days = rng.randint(1, 5)
    if lang == "en":
        city = rng.choice(["Chicago", "Denver", "Austin", "Seattle", "Boston"])
        out = [
            f"Expense claim EXP-{rng.randint(100000, 999999)} | employee E{rng.randint(10000, 99999)} | "
            f"cost centre CC-{rng.randint(4000, 4999)}",
            f"Trip: {city}, {d0:%Y-%m-%d} to {d0 + timedelta(days=days):%Y-%m-%d}, purpose: "
            + rng.choice(["customer workshop", "annual sales conference", "vendor audit", "team offsite"]),
        ]
        items = [
            ("Airfare (economy)", rng.uniform(220, 640)),
            ("Hotel", rng.uniform(130, 210) * days),
            ("Meals per diem", 55.0 * days),
            ("Taxi / rideshare", rng.uniform(18, 140)),
            ("Conference fee", rng.uniform(300, 900)),
        ]
        for name, amt in rng.sample(items, rng.randint(2, 5)):
            out.append(
                f"  {name}: {amt:.2f}" + rng.choice(["", "", " (receipt missing)", " (itemised receipt attached)"])
            )
        out.append(
            "Status: "
            + rng.choice(
                [
                    "approved by manager, pending finance review",
                    "returned: hotel rate exceeds cap, provide justification",
                    "returned: submitted 41 days after trip end",
                    "paid with the next payroll",
                ]
            )
        )
    else:
        city = rng.choice(["上海", "深圳", "北京", "重庆", "厦门"])
        out = [
            f"报销单号：BX{rng.randint(10**8, 10**9 - 1)}  部门：{rng.choice(['华东销售部', '研发中心', '供应链管理部', '市场部'])}",
            f"出差事由：{rng.choice(['客户现场培训', '年度经销商大会', '供应商现场审核', '项目验收'])}，"
            f"目的地{city}，{d0:%Y年%m月%d日}起共{days}天",
        ]
        items = [
            ("机票（经济舱）", rng.uniform(600, 1900)),
            ("住宿费", rng.uniform(350, 680) * days),
            ("伙食补助", 100.0 * days),
            ("市内交通", rng.uniform(40, 260)),
            ("会议费", rng.uniform(800, 2600)),
        ]
        for name, amt in rng.sample(items, rng.randint(2, 5)):
            out.append(f"  {name}：{amt:.2f}元" + rng.choice(["", "", "（缺少发票）", "（已附行程单）"]))
        out.append(
            "审批状态："
            + rng.choice(
                [
                    "部门负责人已审批，待财务审核",
                    "已退回：住宿费超标准，请补充说明",
                    "已退回：超过30日报销时限",
                    "已付款，随当月工资发放",
                ]
            )
        )
    return "\n".join(out)


def fin_loan(rng: random.Random, lang: str) -> str:
    principal = rng.choice([100000, 200000, 350000, 500000, 800000])
    rate = rng.choice([3.45, 3.95, 4.2, 4.9, 5.35])
    years = rng.choice([5, 10, 20, 30])
    n = years * 12
    r = rate / 100 / 12
    pay = principal * r * (1 + r) ** n / ((1 + r) ** n - 1)
    bal = principal
    start = _day(rng)
    rows = []
    for k in range(1, rng.randint(4, 13) + 1):
        interest = bal * r
        prin = pay - interest
        bal -= prin
        rows.append((k, start + timedelta(days=30 * k), pay, prin, interest, bal))
    if lang == "en":
        out = [
            f"Loan {rng.randint(10**7, 10**8 - 1)}: principal {principal:,}, {rate}% fixed, {years} years, "
            f"equal monthly instalments of {pay:,.2f}",
            "No. | Due | Payment | Principal | Interest | Remaining",
        ]
        out += [f"{k} | {d:%Y-%m-%d} | {p:,.2f} | {a:,.2f} | {i:,.2f} | {b:,.2f}" for k, d, p, a, i, b in rows]
        out.append(
            "Early repayment: allowed after 12 instalments; fee 1 % of the amount repaid within the first 3 years."
        )
    else:
        out = [
            f"贷款合同号{rng.randint(10**9, 10**10 - 1)}：本金{principal:,}元，年利率{rate}%，期限{years}年，"
            f"等额本息，每月还款{pay:,.2f}元",
            "期数 | 还款日 | 月供 | 本金 | 利息 | 剩余本金",
        ]
        out += [f"{k} | {d:%Y-%m-%d} | {p:,.2f} | {a:,.2f} | {i:,.2f} | {b:,.2f}" for k, d, p, a, i, b in rows]
        out.append("提前还款：满12期后可申请，前3年内提前还款收取还款金额1%的违约金。")
    return "\n".join(out)


# ======================================================================= customer service

CS_CASES_EN = [
    (
        "Delivery",
        "Order marked delivered on Friday, nothing at my door. Neighbours haven't seen it either.",
        "Checked carrier scan: delivered 14:12, photo shows a different door number. Opened trace TR-{n}.",
    ),
    (
        "Billing",
        "I was charged twice for my subscription this month, {amt} each time.",
        "Confirmed duplicate authorisation; second charge is a pending hold and will drop off in 3-5 days. Customer informed.",
    ),
    (
        "Account access",
        "Locked out after resetting my password, the code never arrives.",
        "SMS gateway delay in the customer's region. Sent code by email after identity check; customer signed in.",
    ),
    (
        "Returns",
        "Returned the boots three weeks ago, still no refund.",
        "Warehouse received the parcel on day 9 but inspection was not logged. Escalated to returns team lead.",
    ),
    (
        "Complaint",
        "The installer was two hours late and left packaging everywhere.",
        "Apologised; logged feedback for the installation partner; offered {amt} goodwill credit per policy.",
    ),
    (
        "Membership",
        "Please cancel my auto-renewal, I didn't know it renews yearly.",
        "Renewal charged 2 days ago, no benefits used. Refunded in full and switched off auto-renewal.",
    ),
]
CS_CASES_ZH = [
    (
        "物流",
        "显示周五签收了，但门口什么都没有，问了邻居也没看到。",
        "查看派送记录：14:12签收，签收照片门牌号不符，已向快递公司发起核查，核查单号HC{n}。",
    ),
    (
        "账单",
        "这个月会员被扣了两次费，每次{amt}元。",
        "确认为重复预授权，第二笔为冻结款，3至5个工作日自动解冻，已告知用户。",
    ),
    (
        "账号",
        "重置密码后账号被锁，验证码一直收不到。",
        "用户所在地区短信通道延迟，完成身份核验后改用邮箱发送验证码，用户已成功登录。",
    ),
    ("退货", "靴子三周前就寄回去了，退款到现在还没到。", "仓库第9天已签收，但未录入质检结果，已升级至退货组组长跟进。"),
    (
        "投诉",
        "安装师傅迟到两个小时，走的时候包装垃圾丢了一地。",
        "已致歉并记录对安装服务商的投诉，按规定赠送{amt}元无门槛券。",
    ),
    ("会员", "帮我关掉自动续费，我不知道是按年扣的。", "两天前扣费，新周期权益未使用，已全额退款并关闭自动续费。"),
]


def cs_ticket(rng: random.Random, lang: str) -> str:
    cases = rng.sample(CS_CASES_EN if lang == "en" else CS_CASES_ZH, rng.randint(1, 3))
    out = []
    for cat, msg, note in cases:
        t = _day(rng)
        n = rng.randint(100000, 999999)
        amt = rng.choice([9.99, 15, 20, 39, 49.9])
        msg = msg.format(amt=amt, n=n)
        note = note.format(amt=amt, n=n)
        if lang == "en":
            out.append(
                f"Ticket CS-{rng.randint(10000, 99999)} | {rng.choice(['chat', 'email', 'phone', 'app'])} | "
                f"opened {t:%Y-%m-%d %H:%M} | category: {cat} | priority: {rng.choice(['normal', 'normal', 'high'])}\n"
                f"Customer: {msg}\nAgent note: {note}\n"
                f"Status: {rng.choice(['resolved', 'pending customer', 'escalated', 'open'])}"
            )
        else:
            out.append(
                f"工单号：CS-{rng.randint(10000, 99999)}  渠道：{rng.choice(['在线客服', '电话', '邮件', 'App反馈'])}  "
                f"创建时间：{t:%Y-%m-%d %H:%M}  分类：{cat}  优先级：{rng.choice(['普通', '普通', '紧急'])}\n"
                f"用户描述：{msg}\n处理记录：{note}\n"
                f"状态：{rng.choice(['已解决', '待用户回复', '已升级', '处理中'])}"
            )
    return "\n\n".join(out)


CHATS_EN = [
    [
        ("Customer", "Hi, I ordered a desk lamp last week and it still says processing."),
        ("Agent", "Sorry about the wait. Could you share the order number?"),
        ("Customer", "It's {order}."),
        ("Agent", "Thanks. The lamp was back-ordered; the warehouse expects stock on {date}."),
        ("Customer", "That's too late, I need it for my daughter's room before school starts."),
        (
            "Agent",
            "I understand. I can cancel it with a full refund, or switch you to a similar lamp that ships today.",
        ),
        ("Customer", "What's the similar one?"),
        ("Agent", "The same brand, dimmable, 3 colour modes, 2 dollars cheaper. I'd refund the difference."),
        ("Customer", "OK, switch it please."),
        ("Agent", "Done. You'll get a new confirmation email within the hour."),
    ],
    [
        ("Customer", "My internet has been dropping every evening since Monday."),
        ("Agent", "I'm sorry to hear that. Are the lights on your router steady or blinking when it drops?"),
        ("Customer", "The DSL light blinks orange."),
        (
            "Agent",
            "That points to the line rather than your Wi-Fi. I can see an open fault in your area, ticket {ticket}.",
        ),
        ("Customer", "When will it be fixed? I work from home."),
        ("Agent", "Engineers estimate {date}. I've added a credit note for the affected days to your account."),
        ("Customer", "Can I get a mobile data boost meanwhile?"),
        ("Agent", "Yes, I've added 20 GB free to your mobile plan until the fault is closed."),
    ],
    [
        ("Customer", "I want to return a jacket but the return label page gives an error."),
        ("Agent", "Let me check. Which error do you see?"),
        ("Customer", "'Return window expired', but I got it 20 days ago."),
        ("Agent", "The window counts from the dispatch date for marketplace items, which was 33 days ago."),
        ("Customer", "That's not what the product page said."),
        (
            "Agent",
            "You're right, the page shows 30 days from delivery. I'll make an exception and email you a label now.",
        ),
    ],
]
CHATS_ZH = [
    [
        ("用户", "你好，我上周买的台灯到现在还显示待发货。"),
        ("客服", "抱歉让您久等了，麻烦提供一下订单号。"),
        ("用户", "{order}"),
        ("客服", "查到了，这款台灯目前缺货，仓库预计{date}到货。"),
        ("用户", "太晚了，孩子开学前就要用。"),
        ("客服", "理解您的心情。可以为您取消订单全额退款，或者换成同品牌一款今天就能发货的台灯。"),
        ("用户", "那款有什么区别？"),
        ("客服", "同样支持调光，有三种色温，价格便宜10元，差价会退给您。"),
        ("用户", "行，那就换吧。"),
        ("客服", "已为您更换，一小时内会收到新的订单确认短信。"),
    ],
    [
        ("用户", "这周一开始每天晚上宽带都会断。"),
        ("客服", "非常抱歉。断线的时候光猫上的灯是常亮还是闪烁？"),
        ("用户", "LOS灯闪红灯。"),
        ("客服", "这说明是线路问题，不是您家里的WiFi。您所在小区目前有一个故障单{ticket}正在处理。"),
        ("用户", "什么时候能修好？我在家办公。"),
        ("客服", "工程师预计{date}修复，受影响的天数会在账单中减免。"),
        ("用户", "这期间能不能送点流量？"),
        ("客服", "可以，已为您的手机套餐赠送20GB流量，故障修复前有效。"),
    ],
    [
        ("用户", "我要退一件外套，但是申请退货页面报错。"),
        ("客服", "我帮您看一下，提示的是什么错误？"),
        ("用户", "说超过退货期限了，可我20天前才收到。"),
        ("客服", "第三方商家的商品退货期限是从发货日算起，发货是33天前。"),
        ("用户", "可商品页写的是签收后30天。"),
        ("客服", "您说得对，页面写的是签收后30天。我这边为您特殊处理，退货单已发到您的手机上。"),
    ],
]


def cs_chat(rng: random.Random, lang: str, script) -> str:
    d = _day(rng) + timedelta(days=rng.randint(3, 12))
    vals = {
        "order": str(rng.randint(10**8, 10**9 - 1)),
        "ticket": f"F{rng.randint(100000, 999999)}",
        "date": f"{d:%B %d}" if lang == "en" else f"{d.month}月{d.day}日",
    }
    t = _day(rng)
    out = ["Chat transcript" if lang == "en" else "在线客服会话记录"]
    for who, text in script:
        t = _ts(rng, t, 3)
        out.append(f"[{t:%H:%M:%S}] {who}: {text.format(**vals)}")
    return "\n".join(out)


# ======================================================================= it support

LOG_LINES = [
    ("INFO", "order-api", "GET /v1/orders/{id} 200 {ms}ms"),
    ("INFO", "order-api", "POST /v1/orders 201 {ms}ms"),
    ("WARN", "order-api", "slow query on orders_items ({ms}ms), plan=seq scan"),
    ("ERROR", "order-api", "upstream payment-svc timed out after 3000ms (attempt 2/3)"),
    ("ERROR", "payment-svc", "HikariPool-1 - Connection is not available, request timed out after 30000ms"),
    ("WARN", "payment-svc", "GC pause {ms}ms (G1 Evacuation Pause), heap 3.7G/4.0G"),
    ("INFO", "payment-svc", "settled batch {id}: 412 transactions"),
    ("ERROR", "billing-etl", "psycopg2.OperationalError: server closed the connection unexpectedly"),
    ("INFO", "billing-etl", "loaded {id} rows into staging.invoices"),
    ("WARN", "gateway", "upstream response time {ms}ms exceeds threshold 1000ms"),
    ("ERROR", "gateway", "connect() failed (111: Connection refused) while connecting to upstream 10.20.3.{n}:8080"),
    ("INFO", "auth-svc", "token refreshed for client id web-portal"),
    ("WARN", "auth-svc", "rate limit reached for client mobile-app, 429 returned"),
    ("ERROR", "inventory", "java.lang.OutOfMemoryError: Java heap space"),
    ("INFO", "inventory", "reserved stock for order {id}"),
    ("WARN", "kafka-consumer", "consumer group orders-sync lag={id} on partition {n}"),
]


def it_log(rng: random.Random) -> str:
    t = _day(rng)
    out = []
    for _ in range(rng.randint(4, 20)):
        t = t + timedelta(milliseconds=rng.randint(5, 40000))
        lvl, svc, msg = rng.choice(LOG_LINES)
        msg = msg.format(id=rng.randint(1000, 99999), ms=rng.randint(12, 4800), n=rng.randint(1, 11))
        out.append(f"{t:%Y-%m-%dT%H:%M:%S}.{rng.randint(0, 999):03d}Z {lvl:<5} [{svc}] {msg}")
    return "\n".join(out)


def it_pod(rng: random.Random) -> str:
    name = rng.choice(["checkout", "billing-worker", "search-indexer", "notification"])
    pod = f"{name}-{rng.randint(10**8, 10**9 - 1):x}-{''.join(rng.choice('abcdefghjkmnpqrstvwxz2456789') for _ in range(5))}"
    code, reason = rng.choice([(137, "OOMKilled"), (1, "Error"), (143, "Error")])
    restarts = rng.randint(3, 48)
    mem = rng.choice(["512Mi", "1Gi", "2Gi"])
    return (
        f"$ kubectl describe pod {pod} -n prod\n"
        f"Name:         {pod}\nNamespace:    prod\nStatus:       Running\n"
        f"Containers:\n  app:\n    Image:          registry.corp.example/{name}:{rng.randint(1, 3)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}\n"
        f"    State:          Waiting\n      Reason:       CrashLoopBackOff\n"
        f"    Last State:     Terminated\n      Reason:       {reason}\n      Exit Code:    {code}\n"
        f"    Restart Count:  {restarts}\n    Limits:\n      cpu:     1\n      memory:  {mem}\n"
        f"    Liveness:   http-get http://:8080/healthz delay=10s timeout=1s period=10s #failure=3\n"
        f"Events:\n  Warning  BackOff    {rng.randint(1, 50)}s (x{restarts * 3} over {rng.randint(20, 90)}m)  kubelet  "
        f"Back-off restarting failed container\n"
        f'  Warning  Unhealthy  {rng.randint(1, 50)}m  kubelet  Liveness probe failed: Get "http://10.42.{rng.randint(0, 9)}.{rng.randint(2, 250)}:8080/healthz": '
        f"context deadline exceeded"
    )


def it_alert(rng: random.Random, lang: str) -> str:
    t = _day(rng)
    svc = rng.choice(["checkout", "payment-svc", "order-api", "redis-cache", "postgres-main", "kafka"])
    metric, thr, val = rng.choice(
        [
            ("p99 latency", "800ms", f"{rng.randint(900, 4000)}ms"),
            ("5xx error rate", "1%", f"{rng.uniform(1.2, 18):.1f}%"),
            ("memory usage", "90%", f"{rng.randint(91, 99)}%"),
            ("disk usage /var/lib", "85%", f"{rng.randint(86, 99)}%"),
            ("consumer lag", "10000", f"{rng.randint(12000, 900000)}"),
        ]
    )
    if lang == "en":
        return (
            f"[FIRING:1] {svc} {metric} high\nSeverity: {rng.choice(['warning', 'critical'])}\n"
            f"Started: {t:%Y-%m-%d %H:%M:%S} UTC\nValue: {val} (threshold {thr}) for 5m\n"
            f"Labels: env=prod cluster=prod-{rng.choice(['east', 'west'])}-1 team={rng.choice(['payments', 'platform', 'commerce'])}\n"
            f"Runbook: https://wiki.corp.example/runbooks/{svc}\n"
            f"Silence: none. Acknowledged by: nobody yet"
        )
    return (
        f"【告警】{svc} {metric}过高\n级别：{rng.choice(['警告', '严重'])}\n开始时间：{t:%Y-%m-%d %H:%M:%S}\n"
        f"当前值：{val}（阈值{thr}，持续5分钟）\n环境：生产  集群：prod-{rng.choice(['east', 'west'])}-1  "
        f"负责团队：{rng.choice(['支付组', '基础平台组', '交易组'])}\n处理手册：https://wiki.corp.example/runbooks/{svc}\n"
        f"认领人：暂无"
    )


TIMELINE_EN = [
    "Alert fired: checkout 5xx error rate above 5 %",
    "On-call engineer acknowledged the page",
    "Incident declared P1 in the incident channel",
    "Identified spike in DB connection errors from payment-svc",
    "Recent deploy of payment-svc v4.12.0 suspected (connection pool size changed from 50 to 5)",
    "Rollback to v4.11.3 started",
    "Rollback complete, error rate falling",
    "Error rate back to baseline; monitoring",
    "Customer support notified; status page updated",
    "Incident resolved; postmortem owner assigned",
]
TIMELINE_ZH = [
    "告警触发：checkout 服务5xx错误率超过5%",
    "值班工程师确认告警",
    "在故障群中宣布P1故障",
    "发现 payment-svc 数据库连接报错激增",
    "怀疑与 payment-svc v4.12.0 发布有关（连接池大小由50改为5）",
    "开始回滚至 v4.11.3",
    "回滚完成，错误率下降",
    "错误率恢复正常，持续观察",
    "已通知客服团队并更新状态页",
    "故障关闭，指定复盘负责人",
]


def it_timeline(rng: random.Random, lang: str) -> str:
    steps = TIMELINE_EN if lang == "en" else TIMELINE_ZH
    k = rng.randint(5, len(steps))
    t = _day(rng)
    out = ["Incident timeline (UTC)" if lang == "en" else "故障时间线"]
    for s in steps[:k]:
        t = _ts(rng, t, 12)
        out.append(f"{t:%H:%M} {s}")
    return "\n".join(out)


TICKET_ZH = [
    ("VPN无法连接", "提示“证书校验失败”，昨天还能用。", "指导用户在终端合规工具中更新设备证书后恢复。"),
    ("打印机脱机", "三楼东侧打印机所有人都显示脱机。", "打印服务器后台服务异常，已重启 spooler 服务，恢复正常。"),
    ("邮箱容量不足", "Outlook提示邮箱已满，无法发送邮件。", "已将用户邮箱配额从50GB调整为100GB，并建议开启在线存档。"),
    (
        "权限申请",
        "需要生产环境Kibana只读权限，用于排查订单问题。",
        "已按审批单开通 prod-logs-readonly 角色，有效期90天。",
    ),
    (
        "数据库连接数满",
        "测试环境 postgres 报 too many clients already。",
        "定位到 report-job 未释放连接，已通知负责人修复并临时重启。",
    ),
    (
        "电脑蓝屏",
        "笔记本开机后反复蓝屏，错误代码 DRIVER_IRQL_NOT_LESS_OR_EQUAL。",
        "回退最近更新的网卡驱动后恢复，已加入驱动黑名单。",
    ),
]


def it_ticket_zh(rng: random.Random) -> str:
    out = []
    for title, desc, fix in rng.sample(TICKET_ZH, rng.randint(1, 3)):
        t = _day(rng)
        out.append(
            f"IT工单 INC{rng.randint(10**6, 10**7 - 1)}｜{title}\n提交时间：{t:%Y-%m-%d %H:%M}  "
            f"影响范围：{rng.choice(['单个用户', '部门', '整层办公区'])}  优先级：{rng.choice(['P3', 'P3', 'P2'])}\n"
            f"问题描述：{desc}\n处理过程：{fix}\n"
            f"状态：{rng.choice(['已解决', '已解决', '待用户确认', '处理中'])}"
        )
    return "\n\n".join(out)


def build_records(rng: random.Random) -> list[tuple[str, str, str]]:
    """(domain, lang, text) record passages, about 11 per domain and language."""
    out: list[tuple[str, str, str]] = []
    for _ in range(4):
        out.append((EC, "en", ec_order_en(rng)))
        out.append((EC, "zh", ec_order_zh(rng)))
    for _ in range(3):
        out.append((EC, "en", ec_tracking_en(rng)))
        out.append((EC, "zh", ec_tracking_zh(rng)))
    for sheet in PRODUCT_SHEETS_EN[:3]:
        out.append((EC, "en", ec_product_en(rng, sheet)))
    for sheet in PRODUCT_SHEETS_ZH[:3]:
        out.append((EC, "zh", ec_product_zh(rng, sheet)))
    for sheet in PRODUCT_SHEETS_EN[3:]:
        out.append((EC, "en", ec_product_en(rng, sheet)))
    for sheet in PRODUCT_SHEETS_ZH[3:]:
        out.append((EC, "zh", ec_product_zh(rng, sheet)))
    for lang in ("en", "zh"):
        for _ in range(2):
            out.append((EC, lang, ec_reviews(rng, lang)))
        for _ in range(3):
            out.append((FIN, lang, fin_statement(rng, lang)))
        for _ in range(3):
            out.append((FIN, lang, fin_aging(rng, lang)))
        for _ in range(3):
            out.append((FIN, lang, fin_expense(rng, lang)))
        for _ in range(2):
            out.append((FIN, lang, fin_loan(rng, lang)))
        for _ in range(6):
            out.append((CS, lang, cs_ticket(rng, lang)))
        for script in CHATS_EN if lang == "en" else CHATS_ZH:
            out.append((CS, lang, cs_chat(rng, lang, script)))
        for _ in range(3):
            out.append((IT, lang, it_alert(rng, lang)))
        for _ in range(2):
            out.append((IT, lang, it_timeline(rng, lang)))
    for _ in range(4):
        out.append((IT, "en", it_log(rng)))
    for _ in range(2):
        out.append((IT, "en", it_pod(rng)))
    for _ in range(4):
        out.append((IT, "zh", it_ticket_zh(rng)))
    for _ in range(2):
        # log excerpts pasted into Chinese tickets stay in English, as they do in practice
        out.append((IT, "zh", "相关日志如下：\n" + it_log(rng)))
    return out
