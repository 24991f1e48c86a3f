"""Hand-written system prompts and context passages (policy excerpts, FAQ
entries, runbooks) of the built-in template library. Written for this
project; company and product names are fictitious."""

from .questions import CS, EC, FIN, IT

SYSTEMS = [
    (CS, "zh", "你是客服助手，请用简洁、礼貌的中文回答。"),
    (CS, "en", "You are a helpful support assistant. Be concise."),
    (
        EC,
        "zh",
        "你是电商平台的智能客服。回答要简短准确；涉及退款、赔付等需要人工确认的问题，"
        "请引导用户提交工单，不要自行承诺。",
    ),
    (
        EC,
        "en",
        "You are a customer service agent for an online retailer. Answer politely in plain "
        "language, keep replies under 120 words, and never promise refunds or compensation; "
        "hand those requests to a human agent.",
    ),
    (
        IT,
        "zh",
        "你是公司内部IT服务台助手。先确认问题现象和影响范围，再给出编号的排查步骤；"
        "涉及生产环境变更时，提醒用户先走变更审批流程。",
    ),
    (
        IT,
        "en",
        "You are the internal IT helpdesk assistant. Ask for the exact error message if it is "
        "missing, give numbered troubleshooting steps, and remind users that production "
        "changes need an approved change ticket.",
    ),
    (
        FIN,
        "zh",
        "你是银行的线上服务助理。回答须合规：不得承诺收益，不得推荐具体股票；"
        "涉及账户信息时，提醒用户通过官方渠道核实身份。回答控制在300字以内。",
    ),
    (
        FIN,
        "en",
        "You are a banking assistant. Do not give personalised investment advice, never ask "
        "for full card numbers or passwords, and refer account-specific questions to the "
        "secure message centre.",
    ),
    (FIN, "zh", "你是财务共享中心的报销助手，依据公司费用报销制度回答员工的问题，能引用条款时请注明条款编号。"),
    (
        FIN,
        "en",
        "You help finance staff with accounts payable and expense policy questions. Cite the "
        "policy section when you can.",
    ),
    (CS, "zh", "仅根据用户提供的参考资料回答；资料中没有的信息，请回答“暂无相关信息”，不要编造。"),
    (
        CS,
        "en",
        "Answer using only the reference material in the user message. If the answer is not "
        "there, say that you don't know.",
    ),
]

CONTEXTS = [
    # ------------------------------------------------------------ customer service, en
    (
        CS,
        "en",
        """Returns and refunds (excerpt, section 4). Most items can be returned within 30 days of delivery if they are unused and in their original packaging. Opened software, gift cards, perishable goods and personalised items cannot be returned. Once the returned item is received and inspected, the refund is issued to the original payment method within 3 business days; banks usually need a further 5 to 10 business days to post it. Shipping fees are refunded only when the return is due to our error (wrong or damaged item). Returns outside the 30-day window may be accepted at the discretion of a team lead and are refunded as store credit.""",
    ),
    (
        CS,
        "en",
        """Membership auto-renewal. Plus memberships renew automatically at the end of each billing period using the payment method on file. Members receive a reminder email 7 days before renewal. Auto-renewal can be switched off at any time under Account > Membership > Manage; the membership then stays active until the end of the current period and no partial refunds are given. If a renewal charge is disputed within 14 days and no member benefits were used in the new period, agents may issue a full refund without approval.""",
    ),
    (
        CS,
        "en",
        """FAQ: My parcel says "delivered" but I don't have it. First check with neighbours, your building's front desk or mailroom, and any safe place you listed at checkout. Carriers sometimes mark a parcel delivered up to 24 hours before it actually arrives. If it has not turned up after 48 hours, contact us with your order number: we open a trace with the carrier, which takes up to 5 business days. If the trace confirms the parcel is lost, we send a replacement or refund the order, whichever you prefer.""",
    ),
    (
        CS,
        "en",
        """Support hours and channels. Live chat and phone: Monday to Friday 8:00-20:00, Saturday and Sunday 9:00-17:00 (local time). On public holidays only live chat is staffed, 10:00-16:00. Email requests are answered within 24 hours on business days. Callback requests can be booked in 30-minute slots up to 5 days ahead. Customers with hearing or speech impairments can use the text relay service at any time during phone hours.""",
    ),
    (
        CS,
        "en",
        """Agent knowledge base: service outage compensation. For a confirmed outage caused by us, compensate as follows. Under 4 hours: apology only, no credit. 4 to 24 hours: credit equal to one day of the monthly fee. 1 to 3 days: credit of 10 % of the monthly fee. More than 3 days: credit of 25 % and a follow-up call from the service recovery team. Credits are applied to the next bill and never paid out in cash. Outages caused by the customer's own equipment are not compensated. Always log the incident ID in the case notes.""",
    ),
    (
        CS,
        "en",
        """Loyalty points rules. Members earn 1 point per dollar spent, excluding taxes, shipping and gift card purchases. Points are credited 14 days after delivery, once the return window has passed. 100 points are worth 1 dollar at checkout. Points expire on 31 December of the year after they were earned. Points cannot be sold, transferred between accounts or exchanged for cash, except that members of the same household account may pool points once per calendar year.""",
    ),
    # ------------------------------------------------------------ customer service, zh
    (
        CS,
        "zh",
        """退换货政策（节选）：自签收之日起7天内，商品未使用、不影响二次销售的，支持无理由退货；15天内出现非人为质量问题的，可选择换货或维修。定制类商品、已拆封的贴身衣物、虚拟商品及生鲜不支持无理由退货。退货寄回后，仓库验收通过即发起退款，原路退回，银行卡一般1至7个工作日到账。因商家原因（发错货、质量问题）产生的运费由商家承担。""",
    ),
    (
        CS,
        "zh",
        """会员自动续费说明：开通连续包月或连续包年后，系统将在每个计费周期到期前24小时自动扣费。关闭方式：App“我的—会员中心—自动续费管理”，或在支付宝/微信支付的免密支付设置中解约。关闭后当前周期权益仍可使用至到期日，已扣费用不做部分退款。若用户在扣费后48小时内申请退款且未使用新周期任何权益，客服可直接全额退款。""",
    ),
    (
        CS,
        "zh",
        """常见问题：物流显示已签收但本人未收到怎么办？请先确认是否被家人、物业、门卫或快递柜代收，部分快递员会在送达前提前点击签收。若签收超过48小时仍未找到包裹，请提供订单号联系在线客服，我们会向快递公司发起核查，核查周期一般为3至5个工作日。确认丢件后，可为您重新发货或全额退款。""",
    ),
    (
        CS,
        "zh",
        """客服服务时间：在线客服每天8:00至22:00；电话客服工作日9:00至18:00，周末及法定节假日10:00至17:00。节假日期间工单回复时效延长至48小时。紧急问题（账户被盗、资金异常）可随时拨打24小时专线，按语音提示转接。预约回电可在App内选择未来3天内的任意时段，每个时段30分钟。""",
    ),
    (
        CS,
        "zh",
        """内部知识库：服务中断补偿标准。经确认由我方原因造成的服务中断，按以下标准补偿：中断不足4小时，致歉不补偿；4至24小时，赠送1天服务时长；1至3天，赠送7天服务时长或等值优惠券；超过3天，补偿当月服务费的25%，并由服务恢复专员回访。补偿仅以时长或账单抵扣形式发放，不支持提现。处理时须在工单中填写故障编号。""",
    ),
    (
        CS,
        "zh",
        """积分规则：每消费1元累计1积分（运费、税费及礼品卡购买不计入）。订单确认收货并过售后期后，积分自动到账。100积分可抵扣1元，单笔订单最多抵扣实付金额的50%。积分有效期为获得之日起至次年12月31日，到期自动清零。积分不得转让、买卖或兑换现金；同一家庭账户的成员每年可合并积分一次。""",
    ),
    # ------------------------------------------------------------ finance, en
    (
        FIN,
        "en",
        """Travel and expense policy, section 3 (excerpt). 3.1 Economy class is the standard for all flights under 6 hours. 3.2 Hotel rates are capped at 180 per night in tier-1 cities and 130 elsewhere, taxes included. 3.3 The meal per diem for domestic travel is 55 per day (15 breakfast, 15 lunch, 25 dinner); meals provided by a conference or client are deducted. 3.4 Itemised receipts are required for any single expense above 25. 3.5 Claims must be submitted within 30 days of the end of the trip; later claims need written approval from the cost-centre owner. 3.6 Alcohol, minibar charges and personal entertainment are not reimbursable.""",
    ),
    (
        FIN,
        "en",
        """Standard credit card terms. Purchase APR: 21.9 % variable. Cash advance APR: 27.9 % variable, charged from the transaction date with no grace period. Grace period: at least 25 days on purchases when the previous statement balance is paid in full. Minimum payment: the greater of 35 or 2 % of the statement balance, plus any past-due amount. Late payment fee: up to 40. Foreign transaction fee: 3 % of each transaction in a foreign currency. Balance transfer fee: 5 %, minimum 5.""",
    ),
    (
        FIN,
        "en",
        """Fixed-term deposits: early withdrawal. A fixed-term deposit may be withdrawn before maturity with 31 days' notice. Interest for the elapsed period is recalculated at the rate of the shortest term fully completed, or at the instant-access rate if no term was completed, and an administration fee of 25 is charged. For a 12-month deposit withdrawn after 7 months, interest is paid at the 6-month rate for 7 months. Partial withdrawals are not allowed; the whole deposit is closed.""",
    ),
    (
        FIN,
        "en",
        """Purchase order approval matrix. Up to 5,000: budget holder. 5,000 to 50,000: budget holder and department head. 50,000 to 250,000: department head, finance business partner and procurement; three competitive quotes required. Above 250,000: CFO approval after a formal tender, and a signed contract before the PO is released. Splitting a purchase to stay under a threshold is a policy breach. Software subscriptions of any amount also need IT security review.""",
    ),
    (
        FIN,
        "en",
        """International wire transfers. Transfers submitted before 15:00 on a business day are sent the same day; later requests go out the next business day. Most transfers arrive within 1 to 3 business days, longer when an intermediary bank is involved. Outgoing fee: 25 online, 40 in branch. The recipient's bank and intermediaries may deduct their own charges unless the OUR charging option is selected (additional 15). A transfer cannot be cancelled once it has been sent, but a recall request can be raised for a fee of 20.""",
    ),
    (
        FIN,
        "en",
        """Card disputes: how it works. If you don't recognise a transaction, first check whether the merchant name on the statement differs from the shop name. To dispute, open the transaction in the app and choose Report a problem, or call the card services line. Disputes must be raised within 120 days of the transaction date. We may issue a temporary credit while we investigate; investigations take up to 45 days, or 90 days for foreign transactions. If the card may be compromised, freeze it immediately; a replacement arrives in 5 to 7 business days.""",
    ),
    # ------------------------------------------------------------ finance, zh
    (
        FIN,
        "zh",
        """《差旅费报销管理办法》（节选）第八条：国内出差住宿费标准为一线城市每人每晚不超过600元，其他城市不超过400元。第九条：伙食补助按出差自然天数计算，每人每天100元；会议或接待方已提供餐食的，按餐次扣减。第十条：交通费凭票据实报销，乘坐飞机须经部门负责人事先审批。第十二条：报销须在出差结束后30日内提交，附行程单、发票及审批单，逾期须说明原因并经分管领导批准。""",
    ),
    (
        FIN,
        "zh",
        """信用卡章程摘要：透支消费享有最长56天免息期，按期全额还款免收利息；选择最低还款或未全额还款的，自记账日起按日利率万分之五计收利息。最低还款额为账单金额的10%加上分期应还款及上期未还部分。预借现金不享受免息期，并按每笔金额的1%收取手续费，最低10元。到期未还最低还款额的，按最低还款额未还部分的5%收取违约金。""",
    ),
    (
        FIN,
        "zh",
        """定期存款提前支取规则：整存整取定期存款可全部或部分提前支取，部分提前支取仅限一次。提前支取部分按支取日挂牌公告的活期存款利率计息，未支取部分按原存期和原利率继续计息。提前支取须本人持有效身份证件办理，代办的须同时出示存款人和代办人的身份证件。大额存单提前支取规则以产品说明书为准。""",
    ),
    (
        FIN,
        "zh",
        """采购审批权限表（2024版）：单笔金额5000元以下，由部门预算负责人审批；5000元至5万元，增加部门总监审批；5万元至50万元，须财务BP及采购部会签，并至少取得三家供应商报价；50万元以上须总经理办公会审议，签订合同后方可下单。严禁拆分采购规避审批。软件及云服务采购不论金额大小，均须经信息安全部评审。""",
    ),
    (
        FIN,
        "zh",
        """跨境汇款说明：工作日15:00前提交的汇款当日处理，之后提交的顺延至下一工作日。一般1至3个工作日到账，经中间行转汇的可能更久。手续费：网银每笔按汇款金额的0.1%收取，最低50元、最高260元，另收电讯费80元。个人每年便利化购汇额度为等值5万美元，须如实申报用途，不得用于境外购房、证券投资等尚未开放的资本项目。""",
    ),
    (
        FIN,
        "zh",
        """理财产品风险揭示书（节选）：本产品为非保本浮动收益型产品，风险等级为R2（中低风险）。业绩比较基准为年化2.80%至3.40%，不代表产品未来表现和实际收益，不构成收益承诺。产品存续期内，投资者可能面临市场风险、信用风险、流动性风险和利率风险等。在极端情况下，投资者可能损失部分本金。请在充分了解产品特性并评估自身风险承受能力后审慎购买。""",
    ),
    # ------------------------------------------------------------ e-commerce, en
    (
        EC,
        "en",
        """Size guide, men's outdoor jackets (cm, chest / length / sleeve). S: 104 / 70 / 62. M: 110 / 72 / 63.5. L: 116 / 74 / 65. XL: 122 / 76 / 66.5. XXL: 128 / 78 / 68. Fit: regular, with room for a mid layer. If you are between sizes or plan to wear a thick fleece underneath, choose the larger size. Measurements are taken flat and may vary by up to 2 cm.""",
    ),
    (
        EC,
        "en",
        """Promotions and coupons: stacking rules. One store coupon and one sitewide promotion (for example "spend 100, save 15") can be used on the same order. Two store coupons cannot be combined. Coupons apply to the item price after the promotion, never to shipping, gift wrap or taxes. If an order is partly returned, the coupon discount is split across the items in proportion to their price, and the refund is reduced accordingly. Free shipping thresholds are checked after all discounts.""",
    ),
    (
        EC,
        "en",
        """Shipping zones and fees. Standard delivery (3-5 business days) costs 4.99 and is free on orders above 49 after discounts. Express (1-2 business days) costs 9.99 and is not available to remote postcodes or PO boxes. International shipping to Canada and the UK takes 7-12 business days; import duties and taxes are calculated at checkout and paid upfront, so nothing is due on delivery. Large items such as furniture ship by freight and are scheduled by phone.""",
    ),
    (
        EC,
        "en",
        """Marketplace returns. Items sold and shipped by third-party sellers follow the seller's own return policy, which must allow at least 14 days. Buyers open a return request in their order; the seller has 2 business days to respond. If the seller does not respond or refuses a return that qualifies under the A-to-Z guarantee (item not received, or significantly not as described), the buyer can escalate and the marketplace refunds the buyer directly, then recovers the amount from the seller.""",
    ),
    (
        EC,
        "en",
        """Refurbished electronics warranty. Every certified refurbished laptop, tablet and phone is tested, cleaned and repackaged, with a battery that holds at least 85 % of its original capacity. It carries a 12-month warranty covering hardware faults that are not caused by accidental damage, liquid or unauthorised repair. Cosmetic grade A means no visible marks at arm's length; grade B may show light scratches. Accessories may be generic but are certified compatible.""",
    ),
    (
        EC,
        "en",
        """Fulfilment fees for sellers (excerpt). Monthly storage fee per cubic foot: 0.78 (January-September) and 2.40 (October-December). Inventory stored for more than 180 days is charged an additional aged-inventory surcharge of 1.50 per cubic foot per month; after 365 days the surcharge rises to 6.90. Sellers can create removal orders at 0.97 per unit to avoid surcharges. Fees are assessed on the 15th of each month based on the average daily volume.""",
    ),
    # ------------------------------------------------------------ e-commerce, zh
    (
        EC,
        "zh",
        """尺码参考表（女款羽绒服，单位：厘米）：S码 胸围96 衣长68 肩宽38，适合身高155-160；M码 胸围100 衣长70 肩宽39，适合160-165；L码 胸围104 衣长72 肩宽40，适合165-170；XL码 胸围108 衣长74 肩宽41，适合170-175。版型偏宽松，平时穿M码、内搭较厚毛衣的顾客建议选择L码。平铺测量，可能存在1-2厘米误差。""",
    ),
    (
        EC,
        "zh",
        """优惠叠加规则：店铺优惠券与平台跨店满减可以同时使用；同一订单只能使用一张店铺优惠券和一张平台券。计算顺序为：先计算单品直降，再计算店铺券，最后计算跨店满减。运费、包装费不参与满减。订单部分退款时，优惠金额按商品实付比例分摊，退款金额相应扣减。使用优惠后实付金额低于包邮门槛的，需要支付运费。""",
    ),
    (
        EC,
        "zh",
        """配送说明：江浙沪皖地区一般次日达，其他地区2至4天送达；新疆、西藏、青海、内蒙古等偏远地区需5至7天，且部分地区不支持顺丰配送。订单满99元包邮，不满99元收取运费8元，偏远地区另加10元。港澳台地区暂只支持顺丰，运费按重量计算，首重1公斤35元，续重每公斤15元，税费由收件人承担。""",
    ),
    (
        EC,
        "zh",
        """七天无理由退货规范（节选）：消费者签收商品之日起七日内，在商品完好的前提下可以无理由退货。商品能够保持原有品质、功能，商品本身、配件、商标标识齐全的，视为商品完好。消费者为检查商品而拆封包装的，不影响商品完好的认定；但对于已激活的电子产品、拆封后影响人身安全或生命健康的商品，如食品、化妆品，拆封后不支持无理由退货。退货运费由消费者承担，商家另有约定的除外。""",
    ),
    (
        EC,
        "zh",
        """价格保护规则：自付款之日起15天内，同一店铺同一商品（同规格、同颜色）降价的，可申请价保，差价以原支付方式或优惠券形式返还。以下情况不支持价保：秒杀、直播间专享价、定金预售、使用优惠券后的价差、赠品及二手商品。每个订单只能申请一次价保，价保申请在App订单详情页“申请价保”中提交，系统自动审核，一般1小时内出结果。""",
    ),
    (
        EC,
        "zh",
        """商品信息发布规范（违规词部分）：商品标题、详情页及主图中不得使用“最”“第一”“国家级”“顶级”“全网销量冠军”等绝对化用语；不得宣称治疗、预防疾病功效（药品、医疗器械除外）；不得使用与商品无关的热门品牌词引流。首次违规的商品将被下架并通知整改，卖家修改后可在后台“违规管理”中提交申诉，审核时效为1至3个工作日。一年内累计违规三次的店铺将被限制报名营销活动。""",
    ),
    # ------------------------------------------------------------ it support, en
    (
        IT,
        "en",
        """KB-0142 Connecting to the corporate VPN. 1. Install the VPN client from the Software Center (Windows) or Self Service (macOS). 2. Server address: vpn.corp.example. 3. Sign in with your network account; you will be asked to approve a push notification in the authenticator app. 4. If the client reports "certificate validation failure", your device certificate has expired: open the Device Compliance app and select Renew. 5. VPN passwords are the same as your network password; reset it at the self-service portal, then wait 15 minutes for the change to sync before reconnecting.""",
    ),
    (
        IT,
        "en",
        """Password and MFA standard (excerpt). Network passwords must be at least 14 characters and are not forced to expire, but must be changed immediately if a compromise is suspected. Accounts lock for 15 minutes after 8 failed sign-ins within 10 minutes. Multi-factor authentication is required for VPN, email from unmanaged devices and all admin consoles. When you replace your phone, register the new device at the MFA portal before wiping the old one; if the old phone is lost, the service desk can issue a temporary access code after verifying your identity by video call.""",
    ),
    (
        IT,
        "en",
        """Change management policy. Every change to a production system needs a change ticket. Standard changes (pre-approved, low risk, e.g. certificate renewal using the runbook) can be done at any time. Normal changes need peer review and approval by the change advisory board, which meets Tuesdays and Thursdays. Emergency changes may be approved by the on-call duty manager and must be reviewed at the next board meeting. No normal changes are allowed during the freeze window from 20 December to 3 January. Each ticket must include a rollback plan and a test result.""",
    ),
    (
        IT,
        "en",
        """Incident priorities. P1: a customer-facing service is down or data is at risk; response in 15 minutes, updates every 30 minutes, 24/7. P2: major degradation or a workaround exists for an outage; response in 30 minutes, updates every 2 hours during business hours. P3: a single user or non-critical function is affected; response in 4 business hours. P4: requests and questions; response in 2 business days. Anyone can declare a P1 from the incident channel with /incident declare.""",
    ),
    (
        IT,
        "en",
        """Runbook: pod in CrashLoopBackOff. 1. kubectl describe pod <name> and read the Last State and exit code: 137 usually means OOMKilled, 1 means an application error. 2. kubectl logs <name> --previous to see the output of the crashed container. 3. Check recent changes: image tag, ConfigMap and Secret updates, resource limits. 4. If the liveness probe fails during slow start-up, raise initialDelaySeconds or add a startupProbe. 5. If the previous image was healthy, roll back with kubectl rollout undo deployment/<name> and open a change ticket.""",
    ),
    (
        IT,
        "en",
        """Data sharing with external parties. Confidential data may only be shared through the managed file transfer service or a shared folder on the corporate cloud drive with an expiry date of at most 30 days. Personal USB drives and consumer file-sharing sites are not allowed. Files containing customer data must be encrypted and the password sent through a separate channel. Links must be restricted to named recipients; "anyone with the link" sharing is disabled for external domains.""",
    ),
    # ------------------------------------------------------------ it support, zh
    (
        IT,
        "zh",
        """VPN使用说明：1. 在软件中心安装公司VPN客户端；2. 服务器地址填写 vpn.corp.example；3. 使用域账号登录，登录时需在手机令牌App上确认推送；4. 提示“证书校验失败”时，说明设备证书已过期，请打开“终端合规”工具点击更新证书；5. VPN密码与域账号密码相同，在自助服务门户重置后约15分钟生效。连续输错密码8次账号将被锁定15分钟。""",
    ),
    (
        IT,
        "zh",
        """账号安全规范（节选）：域账号密码长度不少于14位，须包含大小写字母、数字中的至少两类；怀疑泄露时应立即修改。访问VPN、邮件及所有管理后台必须开启多因素认证。更换手机时，请先在MFA自助门户登记新设备，再注销旧设备；旧手机丢失的，可联系服务台，经视频核验身份后发放临时验证码，有效期24小时。""",
    ),
    (
        IT,
        "zh",
        """生产变更管理规范：所有生产环境变更必须提交变更单。标准变更（已预审批的低风险操作，如按手册续期证书）可随时实施；普通变更须经同行评审并由变更委员会审批，委员会每周二、周四开会；紧急变更可由当班值班经理审批，事后补充评审。每年12月20日至次年1月3日为封网期，禁止实施普通变更。变更单须包含回滚方案和验证结果。""",
    ),
    (
        IT,
        "zh",
        """故障等级定义：P1，面向客户的核心服务不可用或存在数据丢失风险，15分钟内响应，每30分钟同步进展，7×24小时处理；P2，服务严重降级或故障存在临时绕行方案，30分钟内响应，工作时间每2小时同步；P3，影响单个用户或非核心功能，4个工作小时内响应；P4，咨询与需求类，2个工作日内响应。""",
    ),
    (
        IT,
        "zh",
        """运维手册：Kafka消费积压排查。1. 在监控面板查看消费组 lag 的增长趋势，确认是全部分区积压还是个别分区；2. 个别分区积压时，检查该分区对应的消费者实例是否卡住、是否频繁 rebalance；3. 全部分区积压时，对比生产速率与消费速率，确认下游数据库或接口是否变慢；4. 临时扩容消费者实例数不能超过分区数；5. 必要时可开启跳过策略，但须经业务方确认并记录在变更单中。""",
    ),
    (
        IT,
        "zh",
        """办公网络常见问题：连不上会议室WiFi时，先确认连接的是“Corp-Office”而不是访客网络；如果只有某一间会议室有问题，多半是该房间的无线AP故障，请在服务台提交工单并注明房间号。打印机显示脱机时，请先在“设备和打印机”中删除后重新添加；若整层打印机都脱机，可能是打印服务器故障，服务台会统一处理。""",
    ),
]
