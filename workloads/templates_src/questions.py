"""Hand-written questions of the built-in template library (written for this project)."""

CS = "customer-service"
FIN = "finance"
EC = "e-commerce"
IT = "it-support"

QUESTIONS = {
    (CS, "en"): """
How do I change the phone number linked to my account?
I was charged twice for the same order, can you help?
What are your customer service hours on public holidays?
My package shows delivered but I never received it. What should I do?
Can I change the delivery address after the order has shipped?
How long does a refund take to reach my credit card?
I want to cancel my membership before the next billing date. How?
Why was my account locked after a few failed logins?
Is there a way to talk to a human agent instead of the chatbot?
The courier left a notice but I was home all day. Can you reschedule the delivery?
How do I request a paper invoice for my purchase?
I received the wrong color. Do I need to send it back before you ship the right one?
Can you explain the late fee on my last bill?
How do I file a complaint about a rude delivery driver?
What documents do I need to close my account?
My discount code says expired but the email said it's valid until Sunday.
Where can I find my order history from last year?
Do you offer phone support in Spanish?
I never got the verification email. Can you resend it?
How can I update my billing address without calling?
The app logs me out every few minutes, is this a known issue?
Can I transfer my loyalty points to a family member?
What happens to my points if I don't use them this year?
Why did my case get closed without a reply?
My refund was approved a week ago but I still don't see it. Case number CS-48213.
Can someone call me back tomorrow morning instead?
How do I unsubscribe from marketing text messages?
The technician never showed up for my 2-4 pm appointment today.
Is it possible to pause my subscription for two months while I travel?
Do you adjust the price if an item goes on sale a few days after I buy it?
I'd like to escalate my issue to a supervisor, please.
Please write a polite reply to a customer asking for a refund outside the 30-day window.
Summarize this customer's complaint in two sentences and suggest next steps.
Classify the sentiment of the following ticket as positive, neutral or negative.
hi my order hasnt arrived yet and its been 10 days??
How do I add a second user to my household account?
Why do I have to verify my identity again?
The gift card balance shows zero but I haven't used it.
Can I get compensation for the three days my service was down?
My order was split into two shipments; why was I charged shipping twice?
What's the fastest way to reach support if the website is down?
Based on the chat below, what did the agent promise the customer?
""",
    (CS, "zh"): """
怎么修改账号绑定的手机号？
同一笔订单被扣了两次款，怎么处理？
节假日客服几点上班？
物流显示已签收，但我根本没收到快递。
订单已经发货了还能改收货地址吗？
退款一般几天能退回到银行卡？
会员自动续费怎么关闭？
账号登录提示被冻结了，怎么解冻？
机器人答非所问，怎么转人工客服？
快递员没打电话就把包裹放驿站了，可以投诉吗？
我需要开增值税专用发票，要提供哪些信息？
收到的商品颜色不对，需要先寄回才能换货吗？
上个月账单里的滞纳金是怎么算出来的？
我想注销账号，注销后数据还能恢复吗？
优惠券明明没过期，为什么下单时用不了？
去年的订单记录在哪里可以查到？
收不到短信验证码怎么办？
积分可以转给家人用吗？
我的积分年底会清零吗？
我的工单 CS-20931 已经三天没人回复了。
退款审核通过一周了还没到账，麻烦帮忙查一下。
可以明天上午再给我回个电话吗？
天天收到促销短信，怎么退订？
约好下午两点到四点上门安装，师傅到现在都没来。
出差两个月，能暂停订阅服务吗？
买完第二天就降价了，可以申请价保吗？
我要投诉，请帮我升级处理。
帮我把这段客户投诉概括成两句话，并给出处理建议。
判断下面这条工单的情绪是正面、中性还是负面。
请帮我写一段回复，礼貌地拒绝超过30天的退货申请。
为什么每次登录都要重新刷脸？
礼品卡余额显示为零，可我从来没用过。
服务中断了三天，能给点补偿吗？
一个订单分成两个包裹发货，为什么收了两次运费？
官网打不开的时候怎么联系客服？
家庭账户怎么添加成员？
你们的客服电话是多少
我的快递到哪了 三天没更新了
换货申请提交后多久有人审核？
客户说收到的商品有破损，按照政策应该怎么处理？
请根据以下对话记录，生成一条工单摘要。
家里老人不会用手机，我能替他办理退订吗？
""",
    (FIN, "en"): """
What is the annual percentage rate on the standard credit card?
Why was my card declined at a gas station abroad?
How do I dispute a transaction I don't recognize?
When will my salary deposit show as available balance?
Is there a penalty for repaying my personal loan early?
Can I increase my daily transfer limit in the app?
How is interest on a fixed deposit calculated if I withdraw early?
Explain the difference between the statement balance and the current balance.
What documents are needed to apply for a small business loan?
How long does an international wire transfer usually take?
Is there a fee for replacing a lost debit card?
Please reconcile the statement lines below against the invoice list and flag mismatches.
How do I submit a travel expense claim for a conference trip?
What is the per diem limit for meals on domestic business travel?
Why was my reimbursement request rejected?
Calculate the monthly payment on a 200,000 loan at 4.2% over 20 years.
What does "pending authorization" mean on my account?
Can I set up automatic payments for my credit card bill?
How do I change the beneficiary on my savings account?
Summarize the key risks in this fund's quarterly report.
What is the minimum payment due if my statement balance is 3,450?
Why did my credit limit decrease without notice?
How do I get a tax statement for last year's interest income?
Which invoices from Northwind Office Supply are more than 60 days overdue?
Is the cash-back on groceries capped each month?
Why was I charged a foreign transaction fee on this purchase?
My mortgage escrow payment went up. Why?
Can I pay a supplier in euros from a USD business account?
Draft an email to a client reminding them that invoice INV-20931 is 15 days past due.
What is the cut-off time for same-day ACH transfers?
How is the early withdrawal penalty on a 12-month CD calculated?
What's the approval workflow for purchase orders above 50,000?
How do I freeze my card temporarily?
Why is there a hold on the check I deposited on Monday?
Compare the two savings plans below and tell me which one pays more after three years.
What are the steps to close the books at month end?
Which cost center should a team software subscription be charged to?
Does the bank report late payments to credit bureaus after 30 days?
Explain this line on my statement: "ADJ INT REV 12.48 CR".
How can I download my transactions as CSV for my accountant?
""",
    (FIN, "zh"): """
信用卡的年化利率是多少？
在国外加油站刷卡被拒了，是什么原因？
账单里有一笔我不认识的消费，怎么申请争议处理？
工资到账后为什么显示不可用余额？
个人贷款提前还款要收违约金吗？
手机银行的单日转账限额怎么调高？
定期存款提前支取，利息怎么算？
账单金额和当前欠款有什么区别？
申请小微企业贷款需要准备哪些材料？
跨境汇款一般几天到账？
借记卡丢了补办要收费吗？
出差报销需要哪些票据？
国内出差的餐补标准是多少？
我的报销单为什么被退回了？
贷款20万，年利率4.2%，分20年等额本息，每月还多少？
账户里显示“预授权冻结”是什么意思？
信用卡可以设置自动还款吗？
理财产品的业绩比较基准是保证收益吗？
帮我总结一下这份基金季报里的主要风险点。
本期账单3450元，最低还款额是多少？
信用额度突然被降了，是什么原因？
去年的利息收入怎么开纳税证明？
哪些供应商发票已经逾期超过60天未付款？
发票抬头写错了还能报销吗？
外币消费的货币转换费怎么收？
LPR下调以后，房贷月供从什么时候开始变？
公司对公账户可以直接用欧元付款给供应商吗？
帮我写一封邮件，提醒客户发票 INV-20931 已逾期15天。
跨行转账几点以后就要第二天到账？
采购金额超过5万元的审批流程是怎样的？
银行卡怎么临时挂失？
请对比下面两款理财产品，持有三年哪个收益更高？
月末结账需要做哪些步骤？
团队的软件订阅费用应该记到哪个成本中心？
信用卡逾期多久会上征信？
对账单上“利息调整 12.48 贷”是什么意思？
怎么导出近半年的交易流水发给会计？
增值税专用发票的勾选认证有期限吗？
备用金借款没有按时冲账会怎么样？
帮我核对以下对账单和发票清单，标出金额不一致的记录。
分期手续费和利息有什么区别？
""",
    (EC, "en"): """
Does this jacket run true to size or should I size up?
Is the 65-inch model wall-mountable with a standard VESA bracket?
When will the blue version be back in stock?
Can I combine a store coupon with the holiday sale discount?
Do you ship to Canada, and are duties included?
What's the difference between the Pro and the Standard blender?
Is this phone case compatible with MagSafe chargers?
How do I return an item I paid for with a gift card?
Write a product description for a 750 ml stainless steel insulated water bottle.
Generate five catchy titles for a summer sandal listing.
Why is the estimated delivery date two weeks away?
Are batteries included with the remote?
Is the coffee maker's glass carafe dishwasher safe?
My cart total went up after I applied the coupon. Why is shipping charged now?
Can I pre-order the new model and pay on release?
What does "ships from a third-party seller" mean for returns?
How many reviews mention the zipper breaking?
Summarize the customer reviews for this vacuum cleaner in three bullet points.
Which size should I pick for a 10-year-old who is 140 cm tall?
Does the mattress come with a trial period?
Is express shipping available to rural postcodes?
Translate this product title into Chinese: "Ergonomic Mesh Office Chair with Lumbar Support".
How do I track an order that was shipped with two different carriers?
Can I change the color after placing the order?
What's the warranty on refurbished laptops?
Is this sofa fabric pet-friendly?
As a seller, how do I set up a 48-hour flash sale?
Why was my listing removed for "restricted keywords"?
What's the storage fee for inventory kept more than 180 days in the warehouse?
Recommend a gift under 50 dollars for someone who likes camping.
Are these running shoes good for wide feet?
Do you offer assembly service for furniture?
How do I use store credit at checkout?
Why is the price different in the app and on the website?
Can I buy 40 units for my office and get a VAT invoice?
Is the skincare set suitable for sensitive skin?
Which of these three robot vacuums has the longest battery life?
The item arrived without the charging cable, what now?
Extract the brand, size and color from this product title.
What is the return window for items bought during Black Friday?
""",
    (EC, "zh"): """
这件外套尺码偏大还是偏小？
身高170体重65公斤穿什么码？
这款的蓝色什么时候补货？
店铺优惠券能和平台满减一起用吗？
能寄到香港吗？运费怎么算？
这款空气炸锅和上一代有什么区别？
手机壳支持磁吸充电吗？
用礼品卡买的东西退货，钱退到哪里？
帮我写一段保温杯的商品详情文案，容量750毫升，316不锈钢内胆。
给这款夏季凉鞋起五个吸引人的标题。
为什么预计送达时间要两周？
空调遥控器配电池吗？
咖啡机的玻璃壶能放洗碗机吗？
用了优惠券以后为什么又要付运费了？
新款可以付定金预售吗？
第三方卖家发货的商品，退换货找谁？
帮我总结一下这款吸尘器的买家评价，分三点说。
十岁孩子身高140厘米，选哪个尺码？
这款乳胶床垫有试睡期吗？
偏远地区能发顺丰吗？
把这个商品标题翻译成英文：人体工学网布办公椅带腰托。
一个订单分两个快递发，怎么分别查物流？
下单后还能改颜色吗？
翻新笔记本保修多久？
这款沙发面料防猫抓吗？
商家后台怎么设置限时秒杀？
我的商品链接因为“违规词”被下架了，怎么申诉？
仓库库存超过180天要收多少仓储费？
推荐一款50元以内、适合送给露营爱好者的礼物。
脚背高、脚宽，穿这双跑鞋合适吗？
家具提供送货上门安装吗？
店铺余额怎么在结算时抵扣？
为什么App里和网页上的价格不一样？
公司批量采购40台可以开专票吗？
这套护肤品敏感肌能用吗？
这三款扫地机器人哪个续航最长？
收到的商品少了充电线怎么办？
从这个商品标题里提取品牌、规格和颜色。
双十一买的东西退货期限到什么时候？
直播间下单的赠品什么时候发？
七天无理由退货，拆了包装还能退吗？
""",
    (IT, "en"): """
How do I reset my VPN password?
Outlook keeps asking for my password every few minutes.
The printer on the 3rd floor shows "offline" for everyone.
How do I request admin rights on my laptop?
My pod is stuck in CrashLoopBackOff, what should I check first?
What does "ORA-01555: snapshot too old" mean and how do I fix it?
How do I rotate the database credentials used by the billing service?
Explain this stack trace and suggest the likely cause.
Why does git push fail with "remote rejected: pre-receive hook declined"?
How can I get read access to the production logs in Kibana?
My laptop is running out of disk space, what can I safely delete?
Is there an approved way to share large files with an external partner?
Write a bash one-liner that finds files larger than 1 GB under /var/log.
The nightly ETL job failed with "connection reset by peer". Where do I start?
How do I set up MFA on a new phone?
Teams calls drop after exactly 60 minutes, is that a policy?
Which ports need to be open for the internal package mirror?
Nginx returns 502 Bad Gateway after the last deployment. What could cause it?
How do I roll back a Helm release to the previous revision?
Our Java service's heap grows until it is OOMKilled; how do I take a heap dump in the container?
What's the response SLA for a P2 incident?
I can't connect to the Wi-Fi in meeting room B, other rooms work fine.
Write a SQL query that returns the top 10 customers by revenue last quarter.
Why is my Jenkins build stuck at "Waiting for next available executor"?
How do I renew the TLS certificate for an internal service?
What's the difference between a readiness probe and a liveness probe?
The dashboard shows p99 latency spiked at 14:05. How do I find the cause?
Can I recover a file I deleted from the shared drive yesterday?
My SSH key was rejected after the bastion host was rebuilt.
Turn this incident timeline into a postmortem summary.
Convert this cron expression to plain English: 0 */6 * * 1-5
How do I prepare a new hire's laptop before their first day?
Docker build fails with "no space left on device" on the CI runner.
Which Python versions are supported on the shared data science servers?
Is it safe to upgrade Postgres from 13 to 15 in place?
Kafka consumer lag keeps growing on the orders topic. What should I look at?
How do I report a phishing email?
Explain what this regex does: ^[A-Z]{2}\\d{6}$
Redis hits maxmemory every night around 2 am. Any ideas?
My badge doesn't open the server room door anymore.
""",
    (IT, "zh"): """
VPN密码忘了怎么重置？
Outlook 一直弹窗让我输入密码。
三楼的打印机所有人都显示脱机。
怎么申请电脑的本地管理员权限？
Pod 一直 CrashLoopBackOff，先查什么？
数据库报错 ORA-01555 快照过旧，怎么解决？
计费服务用的数据库密码怎么轮换？
帮我分析一下这段异常堆栈，可能是什么原因？
git push 报 pre-receive hook declined 是什么意思？
怎么申请生产环境日志的查看权限？
电脑C盘满了，哪些文件可以放心删？
给外部合作方发大文件，公司允许用什么方式？
写一个命令，找出 /var/log 下大于1G的文件。
夜间ETL任务报 connection reset by peer，从哪开始排查？
换了新手机，怎么重新绑定MFA？
会议室B连不上WiFi，其他会议室都正常。
内部软件源需要开通哪些端口？
刚上线完Nginx就返回502，可能是什么原因？
Helm 发布怎么回滚到上一个版本？
Java服务内存一直涨直到被OOMKilled，容器里怎么抓堆转储？
P2级故障的响应时效是多少？
写一条SQL，查询上季度收入最高的前10个客户。
Jenkins构建一直卡在等待执行器，怎么办？
内部服务的TLS证书快过期了，怎么续期？
就绪探针和存活探针有什么区别？
监控显示14:05的P99延迟突然飙升，怎么定位？
昨天误删了共享盘上的文件，还能恢复吗？
跳板机重建后SSH密钥登录被拒绝。
把这段故障时间线整理成复盘报告的格式。
解释一下这个cron表达式：0 */6 * * 1-5
新员工入职前，电脑怎么提前配置好？
CI机器上 docker build 报磁盘空间不足。
共享数据分析服务器支持哪个版本的Python？
Postgres 从13原地升级到15安全吗？
orders 主题的Kafka消费延迟一直在涨，该看哪些指标？
收到疑似钓鱼邮件应该怎么上报？
解释一下这个正则：^[A-Z]{2}\\d{6}$
Redis每天凌晨两点左右内存打满，有什么排查思路？
门禁卡刷不开机房的门了。
企业微信收不到消息通知，怎么设置？
测试环境数据库连接数被打满了，怎么查是哪个服务占的？
""",
}
